package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/egress"
)

// The caught rows: a connection the sandbox's rules send to sandboxd's
// transparent listener, against the explicit proxy's CONNECT, in the same
// run. The substrate's loopback is never caught, so the upstreams sit on a
// test host in a network namespace of the bench's own, joined to the
// substrate by a veth pair, and a daemon of its own opens that host's
// address deliberately (--egress-allow-cidr).

// caughtHost are the test host's addresses (a /30 of their own).
const (
	caughtSide = "10.215.0.1"
	caughtHost = "10.215.0.2"
	caughtNet  = "10.215.0.0/30"
)

// caughtSet is the caught rows' cast.
type caughtSet struct {
	streamUp, echoUp string
	sides            []egressSide // direct (from the substrate), proxy CONNECT, caught
	// floor is the kernel's share with no sandboxd at all: a plain relay
	// reached at its loopback port, and the same relay reached by the
	// sandbox's rules (natFloor).
	floor []egressSide
}

func (b *bench) caughtSet(ctx context.Context) (*caughtSet, error) {
	ns := fmt.Sprintf("sbxbench%d", os.Getpid())
	veth := fmt.Sprintf("sbxb%d", os.Getpid()%100000)
	if err := b.addNetns(ns, "the test host"); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"addr", "add", caughtSide + "/30", "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", ns, "addr", "add", caughtHost + "/30", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("test host: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "link" && args[1] == "add" {
			b.cleanup.Add("remove "+veth, func() { exec.Command("ip", "link", "del", veth).Run() })
		}
	}
	cs := &caughtSet{}
	var err error
	if cs.streamUp, err = b.serveInNetns(ns, caughtHost+":0", "upstream stream", serveStream); err != nil {
		return nil, err
	}
	if cs.echoUp, err = b.serveInNetns(ns, caughtHost+":0", "upstream echo", serveEcho); err != nil {
		return nil, err
	}
	d, err := b.startDaemon(ctx, "caught", "--egress-allow-cidr", caughtNet)
	if err != nil {
		return nil, err
	}
	cs.sides = []egressSide{
		{name: "direct"},
		{name: "proxy CONNECT", proxy: sandboxdProxy, inSandbox: true, d: d},
		{name: "caught", inSandbox: true, d: d},
	}
	if cs.floor, err = b.natFloor(d, cs.streamUp); err != nil {
		return nil, err
	}
	return cs, nil
}

// natFloor measures what the kernel alone charges a caught connection: a
// network namespace of the bench's own that carries the caught sandbox's
// very rules (copied with nft from its network namespace, the default
// route over lo included) and a plain relay — accept, dial the stream
// upstream, io.Copy both ways, no policy — that listens inside it on the
// transparent listener's port and on a loopback port of its own. The same
// client then runs in that namespace twice: dialling the test host, which
// the rules' DNAT sends to the relay (the caught side), and dialling the
// relay's own port (the loopback side). Both pass the same relay code, so
// their ratio is the rules' and the NAT's cost, without sandboxd.
func (b *bench) natFloor(d *daemon, upstream string) ([]egressSide, error) {
	ns := fmt.Sprintf("sbxbenchnat%d", os.Getpid())
	if err := b.addNetns(ns, "the floor namespace"); err != nil {
		return nil, err
	}
	rules, err := exec.Command("nsenter", "--target", fmt.Sprint(d.holder), "--net", "nft", "list", "ruleset").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = bytes.TrimSpace(ee.Stderr)
		}
		return nil, fmt.Errorf("floor namespace: read the caught sandbox's rules (nsenter --target %d --net nft list ruleset): %v: %s (nft is Debian's nftables; the sandbox's holder must still run)", d.holder, err, stderr)
	}
	load := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	load.Stdin = bytes.NewReader(rules)
	for _, cmd := range []*exec.Cmd{
		exec.Command("ip", "-n", ns, "link", "set", "lo", "up"),
		exec.Command("ip", "-n", ns, "route", "add", "default", "dev", "lo", "src", "127.0.0.1"),
		load,
	} {
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("floor namespace: %s: %v: %s", strings.Join(cmd.Args, " "), err, out)
		}
	}
	relay := func(ln net.Listener) {
		eachConn(ln, func(c net.Conn) {
			up, err := net.Dial("tcp", upstream) // from the substrate, as the daemon dials
			if err != nil {
				b.logf("floor relay: dial the stream upstream %s: %v", upstream, err)
				return
			}
			defer up.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				io.Copy(up, c)
				closeWriteOf(up)
			}()
			io.Copy(c, up)
			closeWriteOf(c)
			<-done
		})
	}
	if _, err := b.serveInNetns(ns, fmt.Sprintf("127.0.0.1:%d", egress.CatchPort), "floor relay (caught)", relay); err != nil {
		return nil, err
	}
	loop, err := b.serveInNetns(ns, "127.0.0.1:0", "floor relay (loopback)", relay)
	if err != nil {
		return nil, err
	}
	return []egressSide{
		{name: "floor, loopback", netns: ns, target: loop},
		{name: "floor, caught", netns: ns},
	}, nil
}

// addNetns makes the network namespace ns, removed again when the bench
// ends, for what (in messages).
func (b *bench) addNetns(ns, what string) error {
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: ip netns add %s: %v: %s (one left by a run that crashed goes with `ip netns del %s`)", what, ns, err, bytes.TrimSpace(out), ns)
	}
	b.cleanup.Add("remove "+what+" "+ns, func() { exec.Command("ip", "netns", "del", ns).Run() })
	return nil
}

// closeWriteOf half-closes a TCP connection: the end of one direction is
// passed on while the other may still carry bytes.
func closeWriteOf(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// serveInNetns serves fn on a listener on addr made in the network
// namespace ns; fn runs in the substrate's, where it dials.
func (b *bench) serveInNetns(ns, addr, name string, fn func(net.Listener)) (string, error) {
	errc := make(chan error, 1)
	var ln net.Listener
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in ns
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ln, err = net.Listen("tcp", addr)
		errc <- err
	}()
	if err := <-errc; err != nil {
		return "", fmt.Errorf("%s in the network namespace %s: %w", name, ns, err)
	}
	b.cleanup.Add("close "+name, func() { ln.Close() })
	go fn(ln)
	return ln.Addr().String(), nil
}

// benchCaught: 1 GiB through a caught connection, the time to its first
// response byte, and 100 concurrent caught connections, each against the
// explicit proxy's CONNECT (and the direct path) in the same run.
func benchCaught(ctx context.Context, b *bench) error {
	ps, err := b.proxySet(ctx)
	if err != nil {
		return err
	}
	cs, err := b.caughtSet(ctx)
	if err != nil {
		return err
	}
	run := func(s egressSide, args ...string) (clientResult, error) { return b.runSide(ctx, ps, s, args...) }
	size := pick[int64](b, 1<<30, 128<<20)
	rounds := pick(b, 5, 2)
	var fns []func() (float64, error)
	for _, s := range slices.Concat(cs.sides, cs.floor) {
		fns = append(fns, func() (float64, error) {
			r, err := run(s, "-mode", "connect", "-target", cmp.Or(s.target, cs.streamUp), "-bytes", fmt.Sprint(size))
			return r.MiBps, err
		})
	}
	tp, err := alternate(ctx, 1, rounds, fns...)
	if err != nil {
		return err
	}
	const peer = "the explicit proxy's CONNECT, same sandbox and host"
	floor := tp[4].median() / tp[3].median()
	b.addCaught(&result{id: "caught-1gib", name: "caught connection, " + sizeText(size), unit: "MiB/s", peer: peer,
		peerV: tp[1].median(), ours: tp[2].median(), n: len(tp[2]), spread: max(tp[1].spread(), tp[2].spread()), target: 1,
		detail: fmt.Sprintf("direct from the substrate %s MiB/s: caught/direct %.3f; the kernel's floor (next row) %.3f", fmtNum(tp[0].median()), tp[2].median()/tp[0].median(), floor)})
	b.addCaught(&result{id: "caught-floor", name: "the kernel's floor for a caught connection, " + sizeText(size) + ", no sandboxd", unit: "MiB/s",
		peer: "the same plain relay at its loopback port", peerV: tp[3].median(), ours: tp[4].median(), n: len(tp[4]), spread: max(tp[3].spread(), tp[4].spread()), noTarget: true,
		detail: fmt.Sprintf("a splice relay with no policy, in a network namespace carrying the caught sandbox's rules (copied with nft), reached by the same client through the rules' DNAT and at its own port: caught/loopback %.3f, against sandboxd's caught/CONNECT %.3f", floor, tp[2].median()/tp[1].median())})

	n := fmt.Sprint(pick(b, 500, 100))
	first := make([]samples, len(cs.sides))
	for r := 0; r < rounds+1; r++ {
		for i, s := range cs.sides {
			res, err := run(s, "-mode", "first", "-target", cs.echoUp, "-n", n)
			if err != nil {
				return err
			}
			if r > 0 {
				first[i] = append(first[i], res.P50)
			}
		}
	}
	diff := first[2].median() - first[1].median()
	b.addCaught(&result{id: "caught-first-byte", name: "caught connection, time to the first response byte (connect, 1 byte echoed), p50", unit: "ms",
		peer: peer, peerV: first[1].median(), ours: first[2].median(), n: len(first[2]), spread: first[2].spread(), noTarget: true,
		detail: fmt.Sprintf("%s connections per run; caught − proxy %+.3f ms (target: within 0.1 ms, %s); direct %s ms", n, diff, verdict(diff <= 0.1), fmtNum(first[0].median()))})

	dur := pick(b, 5*time.Second, time.Second)
	p50, p99 := make([]samples, len(cs.sides)), make([]samples, len(cs.sides))
	for r := 0; r < pick(b, 2, 1); r++ {
		for i, s := range cs.sides {
			res, err := run(s, "-mode", "tunnels", "-target", cs.echoUp, "-c", "100", "-d", dur.String())
			if err != nil {
				return fmt.Errorf("100 caught connections: %w", err)
			}
			p50[i], p99[i] = append(p50[i], res.P50), append(p99[i], res.P99)
		}
	}
	for _, q := range []struct {
		name string
		s    []samples
	}{{"p50", p50}, {"p99", p99}} {
		b.addCaught(&result{id: "caught-100-" + q.name, name: "100 concurrent caught connections, 64-byte round trip, " + q.name, unit: "ms",
			peer: "100 CONNECT tunnels through the explicit proxy", peerV: q.s[1].median(), ours: q.s[2].median(), n: len(q.s[2]), spread: q.s[2].spread(),
			noTarget: true, detail: fmt.Sprintf("direct %s ms", fmtNum(q.s[0].median()))})
	}
	return cs.sides[1].d.checkAlive()
}

func (b *bench) addCaught(r *result) {
	b.results = append(b.results, r)
	b.logf("%s: %s %s %s, caught %s %s (target %s) %s; %s", r.name, r.peer, fmtNum(r.peerV), r.unit, fmtNum(r.ours), r.unit, r.targetText(), verdict(r.met()), r.detail)
}

// clientFirst opens n connections to the echo upstream one after the
// other and times each from before the dial (and the CONNECT, through a
// proxy) to the first byte echoed back.
func clientFirst(proxy, target string, n int) (clientResult, error) {
	var lat samples
	for i := -5; i < n; i++ { // five unmeasured
		t0 := time.Now()
		c, br, err := tunnel(proxy, target)
		if err != nil {
			return clientResult{}, err
		}
		if _, err := c.Write([]byte{'x'}); err != nil {
			c.Close()
			return clientResult{}, err
		}
		_, err = io.ReadFull(br, make([]byte, 1))
		elapsed := time.Since(t0)
		c.Close()
		if err != nil {
			return clientResult{}, err
		}
		if i >= 0 {
			lat = append(lat, ms(elapsed))
		}
	}
	return clientResult{P50: lat.pct(50), P99: lat.pct(99), Count: len(lat)}, nil
}
