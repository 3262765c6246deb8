package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// benchScaling: how exec latency grows with concurrent SSH sessions (sshd
// and sandboxd), and how proxy latency grows with concurrent tunnels.
func benchScaling(ctx context.Context, b *bench) error {
	if err := b.execScaling(ctx); err != nil {
		return err
	}
	return b.tunnelScaling(ctx)
}

// sessionsPerConn keeps every connection well under both servers' limit of
// 64 sessions per connection: a server frees a session's slot only after the
// client has answered its channel close, and a worker opens its next session
// at once, so on a loaded machine the server counts more sessions than the
// client has open (sshd refused at 50 per connection, sandboxd at 32 with
// 500 in all). A refusal that still happens is retried and counted.
const sessionsPerConn = 16

func (b *bench) execScaling(ctx context.Context) error {
	peer, ours, err := b.sshPair(ctx)
	if err != nil {
		return err
	}
	levels := pick(b, []int{1, 10, 100, 500}, []int{1, 10, 100})
	rounds := pick(b, 2, 1)
	targets := []*sshTarget{peer, ours}
	curves := []*curve{{name: "OpenSSH sshd", group: "exec", unit: "ms"}, {name: "sandboxd", group: "exec", unit: "ms"}}
	// Points are added as they are measured, so a failure keeps the others.
	b.scaling = append(b.scaling, curves...)
	refused := make([]int, 2)
	defer func() {
		if refused[0]+refused[1] > 0 {
			b.notes = append(b.notes, fmt.Sprintf("Exec scaling: sessions refused for too many on one connection and retried after 20 ms: OpenSSH sshd %d, sandboxd %d.", refused[0], refused[1]))
		}
	}()
	for _, n := range levels {
		perWorker := max(pick(b, 3, 2), pick(b, 200, 40)/n)
		lat := make([]samples, 2)
		wall := make([]time.Duration, 2) // the runs' wall time, for execs per second
		for r := 0; r < rounds; r++ {
			for i, t := range targets {
				l, k, d, err := concurrentExecs(ctx, t, n, perWorker)
				wall[i] += d
				refused[i] += k
				if err != nil {
					return fmt.Errorf("%s, %d sessions: %w", t.name, n, err)
				}
				lat[i] = append(lat[i], l...)
			}
			if err := b.main_.checkAlive(); err != nil {
				return err
			}
		}
		for i := range curves {
			curves[i].points = append(curves[i].points, point{x: float64(n), p50: lat[i].pct(50), p99: lat[i].pct(99)})
		}
		b.logf("%d concurrent SSH execs of `true` (%d each): sshd p50 %.1f p99 %.1f mean %.1f ms; sandboxd p50 %.1f p99 %.1f mean %.1f ms",
			n, perWorker, lat[0].pct(50), lat[0].pct(99), lat[0].mean(), lat[1].pct(50), lat[1].pct(99), lat[1].mean())
		if n > 1 {
			b.addScaling(n, lat, wall)
		}
	}
	return nil
}

// addScaling adds the target rows of one concurrency level: p50 and p99 of
// every exec, each ≤ 1× sshd's. With n workers that each start their next
// exec as soon as one ends, the mean latency is n over the execs per second
// while all n are busy, whatever the order of service (Little's law); over a
// whole run it is less, by the tail in which fewer still run, which is
// longer for a server that serves sessions unevenly. The percentiles also
// carry the order: a server that serves some sessions ahead of others has a
// p50 below its mean and a long p99. So the detail gives the mean and the
// rate.
func (b *bench) addScaling(n int, lat []samples, wall []time.Duration) {
	rate := func(i int) float64 { return float64(len(lat[i])) / wall[i].Seconds() }
	shape := fmt.Sprintf("every exec of every session, both rounds (the How cost grows table); mean %s ms for sshd and %s ms for sandboxd, at %.0f and %.0f execs/s (the runs' wall time, the connections' set-up left out)",
		fmtNum(lat[0].mean()), fmtNum(lat[1].mean()), rate(0), rate(1))
	for _, q := range []float64{50, 99} {
		r := &result{id: fmt.Sprintf("scaling-%d-p%.0f", n, q), name: fmt.Sprintf("%d concurrent SSH sessions, exec of `true`, p%.0f", n, q),
			unit: "ms", peer: "OpenSSH sshd", peerV: lat[0].pct(q), ours: lat[1].pct(q), n: len(lat[1]), target: 1, lessIsOK: true}
		r.detail = shape
		b.results = append(b.results, r)
		b.logf("%s: %s %s ms, sandboxd %s ms → %.3f× (target %s) %s", r.name, r.peer, fmtNum(r.peerV), fmtNum(r.ours), r.ratio(), r.targetText(), verdict(r.met()))
	}
}

// concurrentExecs runs n workers, each doing count execs of `true` one after
// another, over ceil(n/16) connections opened beforehand, all starting
// together; it returns every exec's latency in ms, how many sessions the
// server refused for too many on one connection (retried; the wait counts in
// that exec's latency), and the wall time of the execs (the connections'
// set-up left out).
func concurrentExecs(ctx context.Context, t *sshTarget, n, count int) (samples, int, time.Duration, error) {
	conns, err := dialSessions(t, n)
	defer closeAll(conns)
	if err != nil {
		return nil, 0, 0, err
	}
	t0 := time.Now()
	lat, refused, err := concurrentExecsOn(ctx, conns, n, count)
	return lat, refused, time.Since(t0), err
}

// dialSessions opens the connections n concurrent sessions are spread over;
// on error, those already open are returned too, for closeAll.
func dialSessions(t *sshTarget, n int) ([]*ssh.Client, error) {
	conns := make([]*ssh.Client, 0, (n+sessionsPerConn-1)/sessionsPerConn)
	for len(conns) < cap(conns) {
		c, err := t.dial()
		if err != nil {
			return conns, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*ssh.Client) {
	for _, c := range conns {
		c.Close()
	}
}

// concurrentExecsOn is concurrentExecs on connections already open.
func concurrentExecsOn(ctx context.Context, conns []*ssh.Client, n, count int) (samples, int, error) {
	var refused atomic.Int64
	all, err := inParallel(n, func(w int) (samples, error) {
		c := conns[w%len(conns)]
		var lat samples
		for k := 0; k < count && ctx.Err() == nil; k++ {
			d, err := withTimeout(5*time.Minute, func() (time.Duration, error) {
				t0 := time.Now()
				for {
					_, err := runOn(c, "true")
					var oce *ssh.OpenChannelError
					if errors.As(err, &oce) && oce.Reason == ssh.ResourceShortage && ctx.Err() == nil {
						refused.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					return time.Since(t0), err
				}
			})
			if err != nil {
				return nil, err
			}
			lat = append(lat, ms(d))
		}
		return lat, nil
	})
	if err == nil {
		err = ctx.Err()
	}
	return all, int(refused.Load()), err
}
