package main

import (
	"context"
	"fmt"
	"time"
)

// memSample is one server's memory with some sessions open, in kB.
type memSample struct {
	sessions int
	rss, pss int // sandboxd: the serve process; sshd: the sum over its sshd processes
}

// benchMemory: the daemon's memory at idle and with sessions added one
// connection each (a pty running `cat`, as an agent's `ssh -tt` holds), on a
// daemon and an sshd of their own so that no earlier group's heap is
// counted, against the
// PSS of all of sshd's processes with as many sessions. Kubernetes sizes a
// pod by the resident set, so both the floor and the slope matter; sshd is
// given by PSS because its per-connection processes share most of their
// pages, and RSS would count those once per process.
func benchMemory(ctx context.Context, b *bench) error {
	d, err := b.startDaemon(ctx, "memory")
	if err != nil {
		return err
	}
	defer d.p.Stop(10 * time.Second)
	o, err := b.startOpenSSH(ctx, d.signer, "sshd-memory", true)
	if err != nil {
		return err
	}
	defer o.p.Stop(10 * time.Second)
	targets := []*sshTarget{newSSHTarget("OpenSSH sshd", o.addr, d.signer), newSSHTarget("sandboxd", d.sshAddr, d.signer)}
	memOf := []func(n int) memSample{
		func(n int) memSample {
			s := memSample{sessions: n, pss: treePSS(o.p.PID(), "sshd")}
			for _, st := range processTree(o.p.PID()) {
				if st.comm == "sshd" {
					s.rss += rssKB(st.pid)
				}
			}
			return s
		},
		func(n int) memSample { return memSample{sessions: n, rss: rssKB(d.p.PID()), pss: pssKB(d.p.PID())} },
	}
	levels := pick(b, []int{0, 1, 10, 50, 100}, []int{0, 1, 10})
	var open [2][]*ptySession
	defer func() {
		for _, side := range open {
			for _, s := range side {
				s.c.Close()
			}
		}
	}()
	var mem [2][]memSample
	for _, n := range levels {
		for side, t := range targets {
			for len(open[side]) < n {
				s, err := openPTY(t)
				if err != nil {
					return fmt.Errorf("%s: session %d: %w", t.name, len(open[side])+1, err)
				}
				open[side] = append(open[side], s)
				// The session counts once its command runs.
				if _, err := withTimeout(30*time.Second, func() (time.Duration, error) { return typeKey(s.in, s.out, 'r') }); err != nil {
					return fmt.Errorf("%s: first echo: %w", t.name, err)
				}
			}
		}
		// Let both settle (sshd's per-connection processes finish their
		// privilege separation; the daemon's goroutines park) before reading.
		time.Sleep(pick(b, 2*time.Second, 500*time.Millisecond))
		for side := range targets {
			mem[side] = append(mem[side], memOf[side](n))
		}
		if err := d.checkAlive(); err != nil {
			return err
		}
		b.logf("memory with %d sessions: sshd PSS %d kB (RSS sum %d kB); sandboxd VmRSS %d kB, PSS %d kB", n, mem[0][len(mem[0])-1].pss, mem[0][len(mem[0])-1].rss, mem[1][len(mem[1])-1].rss, mem[1][len(mem[1])-1].pss)
	}
	b.sections = append(b.sections, section{title: "Daemon memory, idle and per session", body: memoryTable(mem)})
	return nil
}

// memoryTable is the levels measured and, last, the cost of one added
// session: the slope from idle to the most sessions.
func memoryTable(mem [2][]memSample) string {
	mb := func(kb int) string { return fmtNum(float64(kb)/1000) + " MB" }
	var rows [][]string
	for i := range mem[1] {
		p, o := mem[0][i], mem[1][i]
		rows = append(rows, []string{fmt.Sprint(o.sessions), mb(p.pss), mb(p.rss), mb(o.rss), mb(o.pss)})
	}
	first, last := 0, len(mem[1])-1
	if n := mem[1][last].sessions - mem[1][first].sessions; n > 0 {
		slope := func(side int, f func(memSample) int) string {
			return fmtNum(float64(f(mem[side][last])-f(mem[side][first]))/float64(n)) + " kB"
		}
		rss := func(s memSample) int { return s.rss }
		pss := func(s memSample) int { return s.pss }
		rows = append(rows, []string{"per added session", slope(0, pss), slope(0, rss), slope(1, rss), slope(1, pss)})
	}
	return "Each session is a connection of its own with a pty running `cat` (an agent's `ssh -tt`), added on both servers before each reading; the daemon is one started for this table alone. sandboxd is the serve process (VmRSS, and PSS from /proc/PID/smaps_rollup); sshd is every sshd process of the benchmark's server — the listener and each connection's — summed (PSS, and the RSS sum that counts shared pages once per process). The commands the sessions run are counted on neither side.\n\n" +
		table([]string{"sessions", "OpenSSH sshd PSS", "OpenSSH sshd RSS sum", "sandboxd VmRSS", "sandboxd PSS"}, rows)
}
