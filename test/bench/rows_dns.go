package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/pkg/egress"
)

// The DNS row: one persistent UDP client inside the sandbox asks the
// sandbox's resolver (egress.ResolverAddr) the same question again and
// again, each answered from its cache; its peer is the same client asking
// the name server itself from the substrate. The name server is the
// benchmark's own, on a loopback address of its own: a daemon started in a
// mount namespace whose /etc/resolv.conf names it forwards there, so no
// question of the benchmark reaches the machine's resolver.

// benchZoneAddr is the benchmark's name server: port 53, since resolv.conf
// names no port, on a loopback address nothing else uses.
var benchZoneAddr = netip.MustParseAddrPort("127.53.0.53:53")

// benchName is the one question, answered with a TTL that outlives the run.
const benchName = "cached.bench.test."

func benchDNS(ctx context.Context, b *bench) error {
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("unshare (util-linux) is needed to give the daemon a resolv.conf of its own: %w", err)
	}
	pc, err := net.ListenPacket("udp", benchZoneAddr.String())
	if err != nil {
		return fmt.Errorf("the benchmark's name server on %s: %w", benchZoneAddr, err)
	}
	b.cleanup.Add("close the benchmark's name server", func() { pc.Close() })
	go serveBenchZone(pc)

	resolv := filepath.Join(b.tmp, "resolv.conf")
	if err := os.WriteFile(resolv, []byte(fmt.Sprintf("nameserver %s\n", benchZoneAddr.Addr())), 0o644); err != nil {
		return err
	}
	d, err := b.startDaemonCmd(ctx, "dns", func(harness string) *exec.Cmd {
		serve := b.serveCmd(harness)
		// unshare execs sh, which execs serve: the proc's pid is serve's.
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
			`mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv, serve.Path}, serve.Args[1:]...)...)
		cmd.Dir = serve.Dir
		return cmd
	})
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	client := filepath.Join(b.tmp, "dns-client")
	if err := copyFile(self, client, 0o755); err != nil {
		return err
	}
	n := fmt.Sprint(pick(b, 5000, 500))
	rounds := pick(b, 5, 2)
	run := func(cmd *exec.Cmd) (clientResult, error) {
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = strings.TrimSpace(string(ee.Stderr))
			}
			return clientResult{}, fmt.Errorf("dns client: %w: %s", err, stderr)
		}
		var res clientResult
		if err := json.Unmarshal(out, &res); err != nil {
			return clientResult{}, fmt.Errorf("dns client: decode %q: %w", out, err)
		}
		return res, nil
	}
	args := func(target string) []string {
		return []string{clientRole, "-mode", "dns", "-target", target, "-n", n}
	}
	p50, p99 := make([]samples, 2), make([]samples, 2)
	for r := 0; r < rounds+1; r++ {
		for side, cmd := range []func() *exec.Cmd{
			func() *exec.Cmd { return exec.CommandContext(ctx, client, args(benchZoneAddr.String())...) },
			func() *exec.Cmd {
				return b.execCmd(d, append([]string{client}, args(egress.ResolverAddr.String())...)...)
			},
		} {
			res, err := run(cmd())
			if err != nil {
				return err
			}
			if r == 0 {
				continue // warm-up
			}
			p50[side] = append(p50[side], res.P50)
			p99[side] = append(p99[side], res.P99)
		}
	}
	peer := "the name server, asked directly from the substrate"
	rp50 := &result{id: "dns-cache-p50", name: "DNS query answered from the cache, p50", unit: "ms", peer: peer,
		peerV: p50[0].median(), ours: p50[1].median(), n: len(p50[1]), spread: p50[1].spread(), target: 0.2, lessIsOK: true, absolute: true}
	rp99 := &result{id: "dns-cache-p99", name: "DNS query answered from the cache, p99", unit: "ms", peer: peer,
		peerV: p99[0].median(), ours: p99[1].median(), n: len(p99[1]), spread: p99[1].spread(), noTarget: true}
	detail := fmt.Sprintf("one persistent UDP client inside the sandbox, %s questions per run for %s to the resolver at %s; the median of the runs' percentiles", n, benchName, egress.ResolverAddr)
	rp50.detail, rp99.detail = detail, detail
	b.results = append(b.results, rp50, rp99)
	for _, r := range []*result{rp50, rp99} {
		b.logf("%s: %s %s %s, sandboxd %s %s (target %s) %s", r.name, r.peer, fmtNum(r.peerV), r.unit, fmtNum(r.ours), r.unit, r.targetText(), verdict(r.met()))
	}
	return d.checkAlive()
}

// serveBenchZone answers benchName's A question, and NXDOMAIN for every
// other, until pc is closed.
func serveBenchZone(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		msg := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired},
			Questions: []dnsmessage.Question{q},
		}
		if strings.EqualFold(q.Name.String(), benchName) && q.Type == dnsmessage.TypeA {
			msg.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 86400},
				Body:   &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}},
			}}
		} else {
			msg.Header.RCode = dnsmessage.RCodeNameError
		}
		if out, err := msg.Pack(); err == nil {
			pc.WriteTo(out, from)
		}
	}
}

// clientDNS asks target benchName n times over one UDP socket, after one
// unmeasured question that fills the resolver's cache, and reports the
// round trips' p50 and p99.
func clientDNS(target string, n int) (clientResult, error) {
	c, err := net.Dial("udp", target)
	if err != nil {
		return clientResult{}, err
	}
	defer c.Close()
	buf := make([]byte, 1500)
	var lat samples
	for i := range n + 1 {
		q := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: uint16(i), RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(benchName), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
		}
		raw, err := q.Pack()
		if err != nil {
			return clientResult{}, err
		}
		t0 := time.Now()
		c.SetDeadline(t0.Add(5 * time.Second))
		if _, err := c.Write(raw); err != nil {
			return clientResult{}, err
		}
		for {
			m, err := c.Read(buf)
			if err != nil {
				return clientResult{}, fmt.Errorf("question %d to %s: %w", i, target, err)
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:m])
			if err != nil || h.ID != uint16(i) {
				continue // a late answer to an earlier question
			}
			if h.RCode != dnsmessage.RCodeSuccess {
				return clientResult{}, fmt.Errorf("%s answered %v", target, h.RCode)
			}
			break
		}
		if i > 0 {
			lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e6)
		}
	}
	return clientResult{P50: lat.pct(50), P99: lat.pct(99), Count: len(lat)}, nil
}
