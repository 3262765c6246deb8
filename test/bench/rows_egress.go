package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// egressRow is one egress measurement on all four sides (direct, sandboxd,
// tinyproxy, squid), in that order.
type egressRow struct {
	id       string
	name     string
	unit     string
	vals     []samples
	lowerWin bool    // latency: lower is better
	target   float64 // sandboxd/direct throughput floor; 0: only "ahead of both peers"
}

func (r *egressRow) med(i int) float64 { return r.vals[i].median() }

// vsDirect is sandboxd's median over the direct side's.
func (r *egressRow) vsDirect() float64 { return r.med(1) / r.med(0) }

// aheadOfPeers says whether sandboxd beats tinyproxy and squid.
func (r *egressRow) aheadOfPeers() bool {
	o := r.med(1)
	for _, i := range []int{2, 3} {
		if r.lowerWin && o > r.med(i) || !r.lowerWin && o < r.med(i) {
			return false
		}
	}
	return true
}

func (r *egressRow) met() bool {
	if !r.aheadOfPeers() {
		return false
	}
	if r.target > 0 {
		return r.vsDirect() >= r.target
	}
	return true
}

func (r *egressRow) targetText() string {
	if r.target > 0 {
		return fmt.Sprintf("≥ %s× direct, ahead of both peers", trimNum(r.target))
	}
	return "ahead of both peers"
}

// runSide runs the egress client once for side and decodes its result.
func (b *bench) runSide(ctx context.Context, ps *proxySet, side egressSide, args ...string) (clientResult, error) {
	argv := append([]string{ps.client, clientRole}, args...)
	if side.proxy != "" {
		argv = append(argv, "-proxy", side.proxy)
	}
	var cmd *exec.Cmd
	if side.inSandbox {
		d := side.d
		if d == nil {
			d = b.main_
		}
		cmd = b.execCmd(d, argv...)
	} else if side.netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", side.netns}, argv...)...)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return clientResult{}, err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return clientResult{}, fmt.Errorf("%s: %w: %s", side.name, err, strings.TrimSpace(errb.String()))
		}
	case <-time.After(10 * time.Minute):
		cmd.Process.Kill()
		<-done
		return clientResult{}, fmt.Errorf("%s: egress client timed out", side.name)
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		return clientResult{}, ctx.Err()
	}
	var res clientResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return clientResult{}, fmt.Errorf("%s: decode %q: %w", side.name, out.String(), err)
	}
	return res, nil
}

// benchEgress: 1 GiB through CONNECT, 1 GiB of plain HTTP, and small
// keep-alive requests, on each of the four sides in turn.
func benchEgress(ctx context.Context, b *bench) error {
	ps, err := b.proxySet(ctx)
	if err != nil {
		return err
	}
	size := pick[int64](b, 1<<30, 128<<20)
	rounds := pick(b, 5, 2)
	sideFns := func(pickV func(clientResult) float64, args ...string) []func() (float64, error) {
		var fns []func() (float64, error)
		for _, s := range ps.sides {
			fns = append(fns, func() (float64, error) {
				r, err := b.runSide(ctx, ps, s, args...)
				return pickV(r), err
			})
		}
		return fns
	}
	mibps := func(r clientResult) float64 { return r.MiBps }
	sz := fmt.Sprint(size)

	s, err := alternate(ctx, 1, rounds, sideFns(mibps, "-mode", "connect", "-target", ps.streamUp, "-bytes", sz)...)
	if err != nil {
		return err
	}
	b.addEgress(&egressRow{id: "egress-connect", name: fmt.Sprintf("CONNECT, %s", sizeText(size)), unit: "MiB/s", vals: s, target: 0.45})

	s, err = alternate(ctx, 1, rounds, sideFns(mibps, "-mode", "plain", "-target", ps.httpUp, "-bytes", sz)...)
	if err != nil {
		return err
	}
	b.addEgress(&egressRow{id: "egress-plain", name: fmt.Sprintf("plain HTTP GET, %s", sizeText(size)), unit: "MiB/s", vals: s, target: 0.35})

	// Small requests: each client run gives its own p50 and p99; the row
	// shows the median over runs.
	n := fmt.Sprint(pick(b, 2000, 200))
	p50s, p99s := make([]samples, len(ps.sides)), make([]samples, len(ps.sides))
	for r := 0; r < rounds+1; r++ {
		for i, side := range ps.sides {
			res, err := b.runSide(ctx, ps, side, "-mode", "small", "-target", ps.httpUp, "-n", n)
			if err != nil {
				return err
			}
			if r == 0 {
				continue // warm-up
			}
			p50s[i] = append(p50s[i], res.P50)
			p99s[i] = append(p99s[i], res.P99)
		}
	}
	b.addEgress(&egressRow{id: "egress-small-p50", name: fmt.Sprintf("keep-alive small GET (%s per run), p50", n), unit: "ms", vals: p50s, lowerWin: true})
	b.addEgress(&egressRow{id: "egress-small-p99", name: fmt.Sprintf("keep-alive small GET (%s per run), p99", n), unit: "ms", vals: p99s, lowerWin: true})
	return b.main_.checkAlive()
}

func (b *bench) addEgress(r *egressRow) {
	b.egress = append(b.egress, r)
	var parts []string
	for i, side := range b.proxies.sides {
		parts = append(parts, fmt.Sprintf("%s %s", side.name, fmtNum(r.med(i))))
	}
	b.logf("%s (%s): %s; sandboxd/direct %.3f (target %s) %s", r.name, r.unit, strings.Join(parts, ", "), r.vsDirect(), r.targetText(), verdict(r.met()))
}

// tunnelScaling measures the round trip of 64 bytes through 1, 10 and 100
// concurrent tunnels on each side.
func (b *bench) tunnelScaling(ctx context.Context) error {
	ps, err := b.proxySet(ctx)
	if err != nil {
		return err
	}
	levels := []int{1, 10, 100}
	dur := pick(b, 5*time.Second, time.Second)
	rounds := pick(b, 2, 1)
	curves := make([]*curve, len(ps.sides))
	for i, s := range ps.sides {
		curves[i] = &curve{name: s.name, group: "proxy", unit: "ms"}
	}
	// Points are added as they are measured, so a failure keeps the others.
	b.scaling = append(b.scaling, curves...)
	for _, c := range levels {
		p50 := make([]samples, len(ps.sides))
		p99 := make([]samples, len(ps.sides))
		for r := 0; r < rounds; r++ {
			for i, s := range ps.sides {
				res, err := b.runSide(ctx, ps, s, "-mode", "tunnels", "-target", ps.echoUp, "-c", fmt.Sprint(c), "-d", dur.String())
				if err != nil {
					return fmt.Errorf("%d tunnels: %w", c, err)
				}
				p50[i] = append(p50[i], res.P50)
				p99[i] = append(p99[i], res.P99)
			}
		}
		for i := range ps.sides {
			curves[i].points = append(curves[i].points, point{x: float64(c), p50: p50[i].median(), p99: p99[i].median()})
		}
		var parts []string
		for i, s := range ps.sides {
			parts = append(parts, fmt.Sprintf("%s %.3f/%.3f", s.name, p50[i].median(), p99[i].median()))
		}
		b.logf("%d concurrent tunnels, 64-byte round trip p50/p99 ms: %s", c, strings.Join(parts, ", "))
	}
	return nil
}

// curve is latency against concurrency for one side.
type curve struct {
	name   string
	group  string // "exec" or "proxy": one plot panel each
	unit   string
	points []point
}

type point struct {
	x, p50, p99 float64
}
