package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"golang.org/x/crypto/ssh"
)

// neutralLevels are the concurrent clients of the neutral table.
var neutralLevels = []int{1, 100}

// neutralPath is one way of running a command in an isolated environment,
// timed from the client's side.
type neutralPath struct {
	name string
	// run does count execs of `true` one after another from each of n
	// clients at once and returns every exec's wall time in ms.
	run func(ctx context.Context, n, count int) (samples, error)
	// alone: its rounds run after the others', not alternated with them.
	alone bool
}

// benchNeutral: one exec of `true`, as a client sees it, through each way in
// that a harness or an agent would use — sandboxd's CLI, docker exec, and an
// SSH exec (into sandboxd, and into OpenSSH's sshd for reference) — at 1
// and 100 concurrent clients, p50 and p99. It is the table the report gives
// a section of its own: nothing in it is tuned for sandboxd, and anyone can
// rerun it with `make bench`.
func benchNeutral(ctx context.Context, b *bench) error {
	d, err := b.mainDaemon(ctx)
	if err != nil {
		return err
	}
	peer, ours, err := b.sshPair(ctx)
	if err != nil {
		return err
	}
	processes := func(argv func() *exec.Cmd) func(ctx context.Context, n, count int) (samples, error) {
		return func(ctx context.Context, n, count int) (samples, error) {
			return inParallel(n, func(int) (samples, error) {
				var lat samples
				for k := 0; k < count && ctx.Err() == nil; k++ {
					v, err := timeRun(argv())
					if err != nil {
						return nil, err
					}
					lat = append(lat, v)
				}
				return lat, ctx.Err()
			})
		}
	}
	// The SSH rows reuse their connections from round to round, as a
	// harness keeps its connection: an exec is a new session on one.
	var conns []*ssh.Client
	defer func() { closeAll(conns) }()
	sshExec := func(t *sshTarget) func(ctx context.Context, n, count int) (samples, error) {
		open := map[int][]*ssh.Client{}
		return func(ctx context.Context, n, count int) (samples, error) {
			if open[n] == nil {
				cs, err := dialSessions(t, n)
				conns = append(conns, cs...)
				if err != nil {
					return nil, err
				}
				open[n] = cs
			}
			lat, refused, err := concurrentExecsOn(ctx, open[n], n, count)
			if refused > 0 {
				b.logf("neutral: %s refused %d sessions (retried)", t.name, refused)
			}
			return lat, err
		}
	}
	paths := []neutralPath{
		{"`sandboxd exec -- true`", processes(func() *exec.Cmd { return b.execCmd(d, "true") }), false},
	}
	if ctr, why := b.dockerContainer(ctx); ctr != "" {
		paths = append(paths, neutralPath{"`docker exec CTR true`", processes(func() *exec.Cmd { return exec.Command("docker", "exec", ctr, "true") }), true})
	} else {
		b.skipped = append(b.skipped, "`docker exec` in the neutral table: "+why)
	}
	paths = append(paths,
		neutralPath{"SSH exec of `true`, sandboxd", sshExec(ours), false},
		neutralPath{"SSH exec of `true`, OpenSSH sshd (no sandbox)", sshExec(peer), false})

	// lat[level][path]; the paths alternate within each round, so that all
	// see the same load, but for docker exec's (alone, below).
	lat := make([][]samples, len(neutralLevels))
	for li, n := range neutralLevels {
		lat[li] = make([]samples, len(paths))
		rounds := pick(b, 100, 10)
		if n > 1 {
			rounds = pick(b, 3, 1)
		}
		// One unmeasured round first: connections, caches, the container.
		// docker exec runs its rounds on its own, after the others: dockerd,
		// containerd and the shim keep working for milliseconds after it
		// returns, which landed in whichever path came next (SSH into
		// sandboxd at 12 ms p50 against 4 ms for sshd, both about 2 ms
		// without it).
		for _, alone := range []bool{false, true} {
			for r := -1; r < rounds && ctx.Err() == nil; r++ {
				for pi, p := range paths {
					if p.alone != alone {
						continue
					}
					l, err := p.run(ctx, n, 1)
					if err != nil {
						return fmt.Errorf("%s, %d clients: %w", p.name, n, err)
					}
					if r >= 0 {
						lat[li][pi] = append(lat[li][pi], l...)
					}
				}
				if err := d.checkAlive(); err != nil {
					return err
				}
			}
		}
		for pi, p := range paths {
			b.logf("neutral, %d clients: %s p50 %s p99 %s ms (n %d)", n, p.name, fmtNum(lat[li][pi].pct(50)), fmtNum(lat[li][pi].pct(99)), len(lat[li][pi]))
		}
	}
	b.sections = append(b.sections, section{title: "The neutral number: one exec, as the client sees it", body: neutralBody(paths, lat), top: true})
	return nil
}

func neutralBody(paths []neutralPath, lat [][]samples) string {
	header := []string{"exec of `true`"}
	for _, n := range neutralLevels {
		c := "clients"
		if n == 1 {
			c = "client"
		}
		header = append(header, fmt.Sprintf("%d %s p50", n, c), fmt.Sprintf("%d %s p99", n, c))
	}
	var rows [][]string
	for pi, p := range paths {
		row := []string{p.name}
		for li := range neutralLevels {
			row = append(row, fmtNum(lat[li][pi].pct(50))+" ms", fmtNum(lat[li][pi].pct(99))+" ms")
		}
		rows = append(rows, row)
	}
	var n []string
	for li := range neutralLevels {
		n = append(n, fmt.Sprintf("%d execs per path at %d", len(lat[li][0]), neutralLevels[li]))
	}
	return "Vendors of agent sandboxes publish their own per-exec figures; this one is measured the same way for every path, on one machine, in one run, and anyone can rerun it: `make bench` (or `go run ./test/bench -only neutral` after `make build`, as root on Debian bookworm with Docker). " +
		"Each figure is the wall time of one exec of `true` from the client's side: a process start of the CLI for `sandboxd exec` and `docker exec` (into a running container of `images/base.sh bookworm`, `--network none`), a new session on an SSH connection opened beforehand for the SSH rows (x/crypto/ssh client; at most 16 sessions per connection, the connections kept from round to round as a harness keeps its own; one unmeasured round first). The other paths alternate within each round; `docker exec` runs its rounds after theirs, as what it leaves working after it returns slowed whichever path came next. " +
		"At 100 clients every client runs its exec at the same moment, and the paths take turns round by round so that all see the same load (" + strings.Join(n, ", ") + "). The OpenSSH row runs on the host with no sandbox at all: it is what an exec costs with none of the isolation.\n\n" +
		table(header, rows) +
		"\nA published `kubectl exec` figure to set beside these was looked for and not found: Kubernetes' own scalability objectives cover API calls and pod start-up, not exec, and what is published about exec latency are single reports of slow cases, not measurements. None is estimated here.\n"
}
