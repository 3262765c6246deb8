package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/forkthread"
)

// sshPair is the two SSH servers measured with the same Go client.
func (b *bench) sshPair(ctx context.Context) (peer, ours *sshTarget, err error) {
	d, err := b.mainDaemon(ctx)
	if err != nil {
		return nil, nil, err
	}
	o, err := b.openSSH(ctx, d.signer)
	if err != nil {
		return nil, nil, err
	}
	return newSSHTarget("OpenSSH sshd", o.addr, d.signer), newSSHTarget("sandboxd", d.sshAddr, d.signer), nil
}

// benchSSH: exec round trip over one connection, a new connection plus one
// exec, and the throughput of 1 GiB of a command's stdout.
func benchSSH(ctx context.Context, b *bench) error {
	peer, ours, err := b.sshPair(ctx)
	if err != nil {
		return err
	}
	if err := b.sshRoundTrip(ctx, peer, ours); err != nil {
		return err
	}
	if err := b.sshNewConn(ctx, peer, ours); err != nil {
		return err
	}
	if err := b.sshStream(ctx, peer, ours); err != nil {
		return err
	}
	b.notes = append(b.notes, fmt.Sprintf("SSH algorithms negotiated by the same x/crypto/ssh client (defaults): OpenSSH sshd — %s; sandboxd — %s.", peer.algos, ours.algos))
	return nil
}

// dialPair opens one connection to each server, for the rows measured on
// established connections.
func dialPair(peer, ours *sshTarget) (cp, co *ssh.Client, err error) {
	if cp, err = peer.dial(); err != nil {
		return nil, nil, err
	}
	if co, err = ours.dial(); err != nil {
		cp.Close()
		return nil, nil, err
	}
	return cp, co, nil
}

// execTrue is one measurement for alternate: a `true` in a new session on
// c, in ms, failed after 30 s.
func execTrue(c *ssh.Client) func() (float64, error) {
	return func() (float64, error) {
		d, err := withTimeout(30*time.Second, func() (time.Duration, error) { return runOn(c, "true") })
		return ms(d), err
	}
}

func (b *bench) sshRoundTrip(ctx context.Context, peer, ours *sshTarget) error {
	cp, co, err := dialPair(peer, ours)
	if err != nil {
		return err
	}
	defer cp.Close()
	defer co.Close()
	n := pick(b, 500, 50)
	// Ten unmeasured rounds first, then the CPU counters are read.
	if _, err := alternate(ctx, 10, 0, execTrue(cp), execTrue(co)); err != nil {
		return err
	}
	// CPU per exec, from each server's process tree: unlike wall time, it
	// hardly moves with what else the machine is doing.
	cpuP0, cpuO0 := treeCPU(b.sshd_.p.PID()), treeCPU(b.main_.p.PID())
	s, err := alternate(ctx, 0, n, execTrue(cp), execTrue(co))
	if err != nil {
		return err
	}
	cpuP, cpuO := (treeCPU(b.sshd_.p.PID())-cpuP0)/float64(n), (treeCPU(b.main_.p.PID())-cpuO0)/float64(n)
	r := b.addPair("ssh-rtt", fmt.Sprintf("SSH exec round trip, %d × `true` on one connection", n), "ms", "OpenSSH sshd", s, 1, true)
	var sumP, sumO float64
	for i := range s[0] {
		sumP += s[0][i]
		sumO += s[1][i]
	}
	r.detail = fmt.Sprintf("median per exec (new session, exec, exit-status, close); the %d execs took %.2f s on sshd and %.2f s on sandboxd in all; p99 %.1f vs %.1f ms; CPU per exec (each server's process tree, children included): sshd %.1f ms, sandboxd %.1f ms", n, sumP/1000, sumO/1000, s[0].pct(99), s[1].pct(99), cpuP, cpuO)
	return b.sshRoundTripRC(ctx, ours, co)
}

// sshRoundTripRC measures, for the record, an sshd whose sessions source
// root's ~/.bashrc, as Debian's bash does under sshd by default: what an
// OpenSSH exec costs on this machine when nobody equalizes the shell.
func (b *bench) sshRoundTripRC(ctx context.Context, ours *sshTarget, co *ssh.Client) error {
	o, err := b.startOpenSSH(ctx, b.main_.signer, "sshd-rc", false)
	if err != nil {
		return err
	}
	defer o.p.Stop(10 * time.Second)
	t := newSSHTarget("OpenSSH sshd (root's ~/.bashrc)", o.addr, b.main_.signer)
	c, err := t.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := alternate(ctx, 2, pick(b, 30, 5), execTrue(c), execTrue(co))
	if err != nil {
		return err
	}
	b.notes = append(b.notes, fmt.Sprintf("With Debian's default behaviour left alone — bash sourcing root's ~/.bashrc for a command sshd runs (SSH_CLIENT is set) — an sshd exec of `true` takes %s ms on this machine (median of %d, alternated with sandboxd at %s ms: %.2f×). That cost is this machine's ~/.bashrc (it runs `pyenv init`), not sshd's: the table's sshd is given `SetEnv SHLVL=1` so that its bash skips the rc file as sandboxd's does, and both do the same work.",
		fmtNum(s[0].median()), len(s[0]), fmtNum(s[1].median()), s[1].median()/s[0].median()))
	b.logf("sshd with root's ~/.bashrc: %s ms per exec; sandboxd %s ms", fmtNum(s[0].median()), fmtNum(s[1].median()))
	return nil
}

func (b *bench) sshNewConn(ctx context.Context, peer, ours *sshTarget) error {
	once := func(t *sshTarget) func() (float64, error) {
		return func() (float64, error) {
			d, err := withTimeout(60*time.Second, func() (time.Duration, error) {
				t0 := time.Now()
				c, err := t.dial()
				if err != nil {
					return 0, err
				}
				defer c.Close()
				if _, err := runOn(c, "true"); err != nil {
					return 0, err
				}
				return time.Since(t0), nil
			})
			return ms(d), err
		}
	}
	s, err := alternate(ctx, 3, pick(b, 60, 8), once(peer), once(ours))
	if err != nil {
		return err
	}
	r := b.addPair("ssh-conn", "SSH new connection + one `true`", "ms", "OpenSSH sshd", s, 0.3, true)
	r.detail = "TCP connect, key exchange, public-key auth, one exec, close"
	return nil
}

func (b *bench) sshStream(ctx context.Context, peer, ours *sshTarget) error {
	size := pick[int64](b, 1<<30, 128<<20)
	cp, co, err := dialPair(peer, ours)
	if err != nil {
		return err
	}
	defer cp.Close()
	defer co.Close()
	once := func(c *ssh.Client) func() (float64, error) {
		return func() (float64, error) {
			return withTimeout(5*time.Minute, func() (float64, error) { return streamOnce(c, size) })
		}
	}
	s, err := alternate(ctx, 1, pick(b, 6, 2), once(cp), once(co))
	if err != nil {
		return err
	}
	r := b.addPair("ssh-stream", fmt.Sprintf("SSH stream, %s of stdout (`head -c`)", sizeText(size)), "MiB/s", "OpenSSH sshd", s, 1.0, false)
	r.detail = "one exec per sample on an open connection; the Go client reads the stdout through a 256 KiB buffer and discards it"
	return b.sshStreamOpenSSHClient(ctx, peer, ours, size)
}

// sshStreamOpenSSHClient repeats the stream with OpenSSH's own client (and
// the cipher the Go client negotiates, aes128-gcm): the Go client is the
// slowest of the three parties here and may set the pace for both servers.
func (b *bench) sshStreamOpenSSHClient(ctx context.Context, peer, ours *sshTarget, size int64) error {
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		b.skipped = append(b.skipped, "stream with OpenSSH's client: no ssh binary")
		return nil
	}
	key := filepath.Join(b.tmp, "agent_key")
	if err := os.WriteFile(key, b.main_.keyPEM, 0o600); err != nil {
		return err
	}
	once := func(t *sshTarget) func() (float64, error) {
		return func() (float64, error) {
			host, port, _ := net.SplitHostPort(t.addr)
			cmd := exec.Command(ssh, "-i", key, "-p", port, "-c", "aes128-gcm@openssh.com",
				"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
				"root@"+host, fmt.Sprintf("head -c %d /dev/zero", size))
			out, err := cmd.StdoutPipe()
			if err != nil {
				return 0, err
			}
			var errb strings.Builder
			cmd.Stderr = &errb
			t0 := time.Now()
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			n, cerr := discardThrough(out, make([]byte, 256<<10))
			werr := cmd.Wait()
			d := time.Since(t0)
			if cerr != nil || werr != nil || n != size {
				return 0, fmt.Errorf("ssh to %s: %d bytes, %v %v: %s", t.name, n, cerr, werr, errb.String())
			}
			return mibPerSec(n, d), nil
		}
	}
	s, err := alternate(ctx, 1, pick(b, 6, 2), once(peer), once(ours))
	if err != nil {
		return err
	}
	r := b.addPair("ssh-stream-openssh", fmt.Sprintf("SSH stream, %s of stdout, OpenSSH's `ssh` client", sizeText(size)), "MiB/s", "OpenSSH sshd", s, 1.0, false)
	r.detail = "`ssh -c aes128-gcm@openssh.com … head -c`, a new connection per sample (its set-up is in the time)"
	return nil
}

func streamOnce(c *ssh.Client, size int64) (float64, error) {
	s, err := c.NewSession()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	out, err := s.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := s.Start(fmt.Sprintf("head -c %d /dev/zero", size)); err != nil {
		return 0, err
	}
	n, err := discardThrough(out, make([]byte, 256<<10))
	if err != nil {
		return 0, err
	}
	if err := s.Wait(); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if n != size {
		return 0, fmt.Errorf("stream: got %d bytes, want %d", n, size)
	}
	return mibPerSec(n, d), nil
}

// discardThrough reads r to its end through buf and counts the bytes.
// io.CopyBuffer(io.Discard, r, buf) would leave buf unused, as io.Discard
// reads for itself, 8 KiB at a time: the Go client then sent a window
// adjust for every 8 KiB it read once 96 KiB were outstanding, a third of
// its CPU in a 1 GiB stream.
func discardThrough(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}

// benchPTY: many concurrent pty sessions, each on a connection of its own
// (as many `ssh -tt` clients would be), running `cat >/dev/null` under the
// terminal's own echo; every session types one key at a time, 10 keys a
// second on average with jitter, and times the echo. The daemon's VmRSS is
// sampled during the run; for sshd the PSS of all its processes is shown for
// comparison. A third side with no server at all — the same number of local
// ptys, typed into by this process — is the floor this machine sets: the
// latency of waking a process and this benchmark on two shared cores. The
// three alternate, one round each at a time.
func benchPTY(ctx context.Context, b *bench) error {
	peer, ours, err := b.sshPair(ctx)
	if err != nil {
		return err
	}
	d := b.main_
	n := pick(b, 200, 50)
	dur := pick(b, 20*time.Second, 3*time.Second)
	rounds := pick(b, 2, 1)
	var lat [3]samples
	// The memory figure of each server, and its peak over the rounds.
	memOf := [2]func() int{
		func() int { return treePSS(b.sshd_.p.PID(), "sshd") },
		func() int { return rssKB(d.p.PID()) },
	}
	var mem [2]int
	for r := 0; r < rounds; r++ {
		l, err := localPTYRound(ctx, b, n, dur)
		if err != nil {
			return fmt.Errorf("local ptys: %w", err)
		}
		lat[2] = append(lat[2], l...)
		for side, t := range []*sshTarget{peer, ours} {
			l, m, err := ptyRound(ctx, b, t, n, dur, memOf[side])
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			lat[side] = append(lat[side], l...)
			mem[side] = max(mem[side], m)
			if err := d.checkAlive(); err != nil {
				return err
			}
			// Disconnected sessions are hung up and reaped (sandboxd: SIGHUP,
			// then SIGKILL after two seconds); let that finish first.
			time.Sleep(3 * time.Second)
		}
	}
	name := fmt.Sprintf("%d concurrent pty sessions, keystroke echo", n)
	floor := fmt.Sprintf("the machine's floor, %d local ptys typed into with no server: p50 %s ms, p99 %s ms", n, fmtNum(lat[2].pct(50)), fmtNum(lat[2].pct(99)))
	p50 := &result{id: "pty-p50", name: name + " p50", unit: "ms", peer: "OpenSSH sshd", peerV: lat[0].pct(50), ours: lat[1].pct(50), n: len(lat[1]), noTarget: true}
	p99 := &result{id: "pty-p99", name: name + " p99", unit: "ms", peer: "OpenSSH sshd", peerV: lat[0].pct(99), ours: lat[1].pct(99), n: len(lat[1]), target: 5, lessIsOK: true, absolute: true}
	rss := &result{id: "pty-rss", name: fmt.Sprintf("daemon memory with %d pty sessions", n), unit: "MB", peer: "OpenSSH sshd (PSS, all sshd processes)", peerV: float64(mem[0]) / 1000, ours: float64(mem[1]) / 1000, n: rounds, target: 100, lessIsOK: true, absolute: true}
	rss.detail = "sandboxd: the highest VmRSS of the serve process sampled every 250 ms; sshd: the highest sum of PSS over its listener and per-connection processes (RSS would count shared pages 2×n times)"
	p50.detail = floor
	p99.detail = fmt.Sprintf("%d keystrokes per server; ~10 keys/s per session (uniform 50–150 ms gaps), echo by the pty line discipline; %s", len(lat[1]), floor)
	b.results = append(b.results, p50, p99, rss)
	for _, r := range []*result{p50, p99, rss} {
		b.logf("%s: %s %s %s, sandboxd %s %s (target %s) %s", r.name, r.peer, fmtNum(r.peerV), r.unit, fmtNum(r.ours), r.unit, r.targetText(), verdict(r.met()))
	}
	b.logf("%s", floor)
	return nil
}

// localPTYRound is ptyRound with no server: n local ptys, each with `cat
// >/dev/null` on its slave, typed into from here.
func localPTYRound(ctx context.Context, b *bench, n int, dur time.Duration) (samples, error) {
	type local struct {
		master *os.File
		out    *bufio.Reader
		cmd    *exec.Cmd
	}
	locals := make([]*local, 0, n)
	defer func() {
		for _, l := range locals {
			l.master.Close()
			l.cmd.Process.Kill()
			l.cmd.Wait()
		}
	}()
	for range n {
		master, tty, err := pty.Open()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("/bin/sh", "-c", "cat >/dev/null")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
		forkthread.Do(func() { err = cmd.Start() }) // Pdeathsig: see startProc
		tty.Close()
		if err != nil {
			master.Close()
			return nil, err
		}
		locals = append(locals, &local{master: master, out: bufio.NewReader(master), cmd: cmd})
	}
	for _, l := range locals {
		if _, err := withTimeout(30*time.Second, func() (time.Duration, error) { return typeKey(l.master, l.out, 'r') }); err != nil {
			return nil, fmt.Errorf("first echo: %w", err)
		}
	}
	lats, err := typeAll(ctx, len(locals), dur, func(i int) (io.Writer, *bufio.Reader) { return locals[i].master, locals[i].out })
	if err != nil {
		return nil, err
	}
	b.logf("no server: %d local ptys, %d keystrokes, echo p50 %.2f ms p99 %.2f ms", n, len(lats), lats.pct(50), lats.pct(99))
	return lats, nil
}

// typeAll has every session type keys for dur — one at a time, waiting for
// each echo, 50–150 ms apart — and returns all the echo latencies in ms.
func typeAll(ctx context.Context, n int, dur time.Duration, session func(i int) (io.Writer, *bufio.Reader)) (samples, error) {
	end := time.Now().Add(dur)
	return inParallel(n, func(i int) (samples, error) {
		in, out := session(i)
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		key := byte('a')
		// Stagger the starts over the first interval.
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		var lat samples
		for time.Now().Before(end) && ctx.Err() == nil {
			d, err := typeKey(in, out, key)
			if err != nil {
				return nil, err
			}
			lat = append(lat, ms(d))
			key = 'a' + (key-'a'+1)%26
			time.Sleep(time.Duration(50+rng.IntN(101)) * time.Millisecond)
		}
		return lat, nil
	})
}

// ptyRound runs n pty sessions against t for dur and returns the echo
// latencies in ms and the highest memory figure memOf reported.
func ptyRound(ctx context.Context, b *bench, t *sshTarget, n int, dur time.Duration, memOf func() int) (samples, int, error) {
	sessions := make([]*ptySession, n)
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16) // connections in handshake at once
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			s, err := openPTY(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			sessions[i] = s
		}()
	}
	wg.Wait()
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.c.Close()
			}
		}
	}()
	if firstErr != nil {
		return nil, 0, firstErr
	}
	// The first keystroke also waits for the command to be running.
	for _, s := range sessions {
		if _, err := withTimeout(30*time.Second, func() (time.Duration, error) { return typeKey(s.in, s.out, 'r') }); err != nil {
			return nil, 0, fmt.Errorf("first echo: %w", err)
		}
	}
	b.debugf("%s: %d pty sessions open", t.name, n)
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if m := int64(memOf()); m > peak.Load() {
				peak.Store(m)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	all, err := typeAll(ctx, n, dur, func(i int) (io.Writer, *bufio.Reader) { return sessions[i].in, sessions[i].out })
	close(stopSampling)
	<-samplerDone
	if err != nil {
		return nil, 0, err
	}
	b.logf("%s: %d pty sessions, %d keystrokes, echo p50 %.2f ms p99 %.2f ms, memory %d kB", t.name, n, len(all), all.pct(50), all.pct(99), peak.Load())
	return all, int(peak.Load()), nil
}

type ptySession struct {
	c   *ssh.Client
	s   *ssh.Session
	in  io.WriteCloser
	out *bufio.Reader
}

func openPTY(t *sshTarget) (*ptySession, error) {
	c, err := t.dial()
	if err != nil {
		return nil, err
	}
	s, err := c.NewSession()
	if err != nil {
		c.Close()
		return nil, err
	}
	fail := func(err error) (*ptySession, error) {
		c.Close()
		return nil, err
	}
	if err := s.RequestPty("xterm", 40, 120, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
		return fail(fmt.Errorf("pty-req: %w", err))
	}
	in, err := s.StdinPipe()
	if err != nil {
		return fail(err)
	}
	out, err := s.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	if err := s.Start("cat >/dev/null"); err != nil {
		return fail(err)
	}
	return &ptySession{c: c, s: s, in: in, out: bufio.NewReader(out)}, nil
}

// typeKey writes one key and waits for its echo.
func typeKey(in io.Writer, out *bufio.Reader, key byte) (time.Duration, error) {
	t0 := time.Now()
	if _, err := in.Write([]byte{key}); err != nil {
		return 0, err
	}
	for {
		c, err := out.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("read echo: %w", err)
		}
		if c == key {
			return time.Since(t0), nil
		}
	}
}
