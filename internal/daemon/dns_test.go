package daemon

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// The sandbox's resolver in a served sandbox, forwarding to a name server
// of the test's own (the daemon's resolver snapshot names it): every type
// answered under public, the transports, and allowlist connections opened
// by what was forwarded (not only by the hosts file).

// webZone answers for web.test (and a CNAME chain below it) with the
// address of a test host, and a few record types of every kind.
func webZone(web netip.Addr) func(dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
	return func(q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
		rr := func(name string, ttl uint32, body dnsmessage.ResourceBody) dnsmessage.Resource {
			return dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Class: dnsmessage.ClassINET, TTL: ttl}, Body: body}
		}
		a := &dnsmessage.AResource{A: web.As4()}
		switch strings.ToLower(q.Name.String()) {
		case "web.test.":
			switch q.Type {
			case dnsmessage.TypeA:
				return 0, []dnsmessage.Resource{rr("web.test.", 300, a)}
			case dnsmessage.TypeMX:
				return 0, []dnsmessage.Resource{rr("web.test.", 300, &dnsmessage.MXResource{Pref: 5, MX: dnsmessage.MustNewName("mx.web.test.")})}
			case dnsmessage.TypeTXT:
				return 0, []dnsmessage.Resource{rr("web.test.", 300, &dnsmessage.TXTResource{TXT: []string{"hello"}})}
			case dnsmessage.TypeSRV:
				return 0, []dnsmessage.Resource{rr("web.test.", 300, &dnsmessage.SRVResource{Priority: 1, Weight: 1, Port: 80, Target: dnsmessage.MustNewName("web.test.")})}
			}
			return 0, nil
		case "www.web.test.":
			chain := []dnsmessage.Resource{rr("www.web.test.", 300, &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("edge.cdn.test.")})}
			if q.Type == dnsmessage.TypeA {
				chain = append(chain, rr("edge.cdn.test.", 60, a))
			}
			return 0, chain
		case "big.web.test.":
			var many []dnsmessage.Resource
			for i := range 40 {
				many = append(many, rr("big.web.test.", 300, &dnsmessage.AResource{A: [4]byte{192, 0, 2, byte(i + 1)}}))
			}
			return 0, many
		}
		b := web.As4()
		if rev := fmt.Sprintf("%d.%d.%d.%d.in-addr.arpa.", b[3], b[2], b[1], b[0]); strings.EqualFold(q.Name.String(), rev) && q.Type == dnsmessage.TypePTR {
			return 0, []dnsmessage.Resource{rr(rev, 300, &dnsmessage.PTRResource{PTR: dnsmessage.MustNewName("web.test.")})}
		}
		return dnsmessage.RCodeNameError, nil
	}
}

// forwardingNet is a test host serving HTTP on :80 whose name only the
// test's name server knows, and the snapshot resolver that forwards there.
func forwardingNet(t *testing.T) (*sandboxtest.TestHost, *sandboxtest.DNSZone, *egress.SnapshotResolver, netip.Prefix, *atomic.Int64) {
	requireTool(t, "dig")
	host := sandboxtest.NewTestHost(t)
	hits := serveBanner(host.Listen(t, 80), "HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nweb\n")
	zone := sandboxtest.StartDNSZone(t, webZone(host.Addr))
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644))
	r, err := egress.NewSnapshotResolver(hosts, filepath.Join(dir, "resolv.conf"))
	require.NoError(t, err)
	return host, zone, r.WithServers(zone.Addr), netip.PrefixFrom(host.Addr, 32), hits
}

// TestResolverForwardsEveryType asks the sandbox's resolver through dig
// and libc, as root and as uid 1000, under public: what the name server
// says, of every type, over UDP and TCP, and at any server address.
func TestResolverForwardsEveryType(t *testing.T) {
	host, zone, resolver, cidr, _ := forwardingNet(t)
	s := serveForTest(t, config.Config{Network: config.Network{Agent: egress.Policy{Mode: egress.Public, AllowCIDRs: []netip.Prefix{cidr}}}, Resolver: resolver})
	web := host.Addr.String()
	cases := []clientCase{
		{"dig A", "dig +short +tries=1 +time=3 web.test", web + "\n"},
		{"dig MX", "dig +short +tries=1 +time=3 web.test MX", "5 mx.web.test.\n"},
		{"dig TXT", "dig +short +tries=1 +time=3 web.test TXT", "\"hello\"\n"},
		{"dig SRV", "dig +short +tries=1 +time=3 web.test SRV", "1 1 80 web.test.\n"},
		{"dig PTR", "dig +short +tries=1 +time=3 -x " + web, "web.test.\n"},
		{"dig a CNAME chain", "dig +short +tries=1 +time=3 www.web.test", "edge.cdn.test.\n" + web + "\n"},
		{"dig over TCP", "dig +short +tcp +tries=1 +time=3 web.test", web + "\n"},
		{"dig without EDNS falls back to TCP", "dig +short +noedns +tries=1 +time=3 big.web.test | wc -l", "40\n"},
		{"dig at another server", "dig +short +tries=1 +time=3 @192.0.2.53 web.test", web + "\n"},
		{"dig of a name nobody has", "dig +tries=1 +time=3 nowhere.test | grep -o 'status: [A-Z]*'", "status: NXDOMAIN\n"},
		{"getent hosts", "getent hosts web.test | cut -d' ' -f1", web + "\n"},
		{"python getaddrinfo", `python3 -c 'import socket; print(sorted({a[4][0] for a in socket.getaddrinfo("www.web.test", 80, proto=socket.IPPROTO_TCP)}))'`, "['" + web + "']\n"},
		{"curl by a forwarded name", "curl -sS --max-time 10 http://www.web.test/", "web\n"},
	}
	for _, user := range []string{"root", "1000"} {
		for _, c := range cases {
			t.Run(user+"/"+c.name, func(t *testing.T) {
				r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", c.script}, User: user, Dir: "/tmp"}, "")
				assert.Equal(t, c.want, r.stdout, "stderr: %s", r.stderr)
			})
		}
	}
	assert.NotZero(t, zone.TCP.Load(), "the TCP questions reached the name server over TCP")
}

// TestResolverOpensAllowlistByForwardedAnswers pins that under allowlist
// an address the name server gave for an allowed name (also at the end of
// a CNAME chain) opens the connection to it, while another name gets
// NXDOMAIN and the same address by IP literal stays refused.
func TestResolverOpensAllowlistByForwardedAnswers(t *testing.T) {
	host, _, resolver, cidr, hits := forwardingNet(t)
	s := serveForTest(t, config.Config{Network: config.Network{
		Agent: egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"*.web.test"}, AllowCIDRs: []netip.Prefix{cidr}},
	}, Resolver: resolver})
	web := host.Addr.String()
	// Refused before the handshake or reset just after it, as the catcher
	// decides; nothing reaches the host either way.
	r := s.sh(t, pyConnect+web+" 80 | sed -E 's/Connection(Refused|Reset)Error/refused/'")
	assert.Equal(t, "refused\n", r.stdout, "an IP literal before any answer: %s", r.stderr)
	assert.Zero(t, hits.Load(), "nothing reached the host")
	for _, c := range []clientCase{
		{"a name the allowlist lacks", "dig +tries=1 +time=3 web.test | grep -o 'status: [A-Z]*'", "status: NXDOMAIN\n"},
		{"an allowed name at the end of a CNAME chain", "curl -sS --max-time 10 http://www.web.test/", "web\n"},
		{"python by the allowed name", pyConnect + "www.web.test 80", "web\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := s.sh(t, c.script)
			assert.Equal(t, c.want, r.stdout, "stderr: %s", r.stderr)
		})
	}
}

// TestVerifierAsksTheSandboxResolver pins the visitor's view: the same
// resolv.conf as the agent's, and the verifier's questions answered under
// the verifier's policy (public here, while the agent's is no-network).
func TestVerifierAsksTheSandboxResolver(t *testing.T) {
	host, _, resolver, _, _ := forwardingNet(t)
	dir := taskDir(t, "[agent]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"public\"\n",
		`grep nameserver /etc/resolv.conf > /logs/verifier/resolv; dig +short +tries=1 +time=3 web.test > /logs/verifier/dig; echo 1 > /logs/verifier/reward.txt`)
	s := serveTask(t, dir, config.Config{Resolver: resolver})
	r := s.sh(t, "dig +tries=1 +time=3 web.test | grep -o 'status: [A-Z]*'")
	assert.Equal(t, "status: REFUSED\n", r.stdout, "the agent's policy: %s", r.stderr)
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	got, _ := os.ReadFile("/logs/verifier/resolv")
	assert.Equal(t, fmt.Sprintf("nameserver %s\n", egress.ResolverAddr.Addr()), string(got))
	got, _ = os.ReadFile("/logs/verifier/dig")
	assert.Equal(t, host.Addr.String()+"\n", string(got), "the verifier's policy")
}
