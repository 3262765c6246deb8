package attack

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// refusedByProxy is the check of a request through a proxy inside: anything
// but a 2xx holds.
func refusedByProxy(x result) string {
	if x.code == 0 {
		return "the proxy carried it"
	}
	if x.code >= 125 || !strings.Contains(x.stdout, "HTTP/1.1 ") {
		return "no answer from the proxy (the attempt did not run)"
	}
	return ""
}

// answeredInside is the check of a datagram to port 53: the sandbox's
// resolver takes every one, wherever it was sent, and the test host's UDP
// listener never answers, so an answer held if it is the sandbox's
// (SERVFAIL: the resolver here forwards to no server) and a send held if
// nothing arrived (checked outside).
func answeredInside(x result) string {
	switch {
	case x.code != 0, strings.Contains(x.stdout, "sent to "):
		return ""
	case strings.Contains(x.stdout, `\x81\x82`):
		return ""
	}
	return "answered by something other than the sandbox's resolver"
}

// networkAttempts reach for everything outside the policy. The rollout's
// policy is public, with exactly the test host's first address opened
// (as --egress-allow-cidr would), so that the proxy demonstrably works.
func networkAttempts(n *network) []attempt {
	lp, l6p, hsp := port(n.loopbackTCP.addr), port(n.loopback6TCP.addr), port(n.hostSideTCP.addr)
	direct := []attempt{
		{name: "TCP to the substrate's loopback", sh: `{PY} tcp 127.0.0.1 ` + lp},
		{name: "TCP to the substrate's IPv6 loopback", sh: `{PY} tcp ::1 ` + l6p},
		{name: "TCP to the SSH door", sh: `{PY} tcp 127.0.0.1 {SSHPORT}`},
		{name: "TCP to the substrate's own veth address", sh: `{PY} tcp ` + hostSide + ` ` + hsp},
		{name: "TCP to the second test host", sh: `{PY} tcp ` + testHost2 + ` 80`},
		{name: "TCP to the test host over IPv6", sh: `{PY} tcp ` + testHost6 + ` 80`},
		{name: "UDP to the test host", sh: `{PY} udp ` + testHost + ` 9`},
		{name: "UDP to the test host's port 53", sh: `{PY} udp ` + testHost + ` 53`, check: answeredInside},
		{name: "UDP to the substrate's loopback", sh: `{PY} udp 127.0.0.1 ` + port(n.loopbackUDP.addr) + `; exit 1`},
		{name: "DNS query to the test host", sh: `{PY} dns ` + testHost + ` example.test`, check: answeredInside},
		{name: "DNS query to the resolver the substrate names", sh: `for s in $(awk '/^nameserver/ {print $2}' /etc/resolv.conf); do case $s in 127.*|::1) {PY} dns $s example.test && exit 0;; esac; done; exit 1`, check: answeredInside},
		{name: "rewrite resolv.conf to name the test host, then ask the first name server", sh: `printf 'nameserver ` + testHost + `\n' > /etc/resolv.conf 2>/dev/null; {PY} dns $(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf) example.test`, check: answeredInside},
		{name: "raw and packet sockets", sh: `{PY} raw`},
		{name: "the substrate's abstract unix socket", sh: `{PY} abstract ` + n.abstract},
	}
	proxy := []attempt{
		{name: "the visitor port without a token", sh: `{PY} proxy 3129 GET http://testhost.test/`, check: refusedByProxy},
		{name: "the visitor port with a guessed token", sh: `{PY} proxy 3129 CONNECT testhost.test:80 "Proxy-Authorization: Basic dmlzaXRvcjp2aXNpdG9y"`, check: refusedByProxy},
		{name: "squat on the agent proxy's port", sh: `{PY} bind 127.0.0.1 3128`},
		{name: "squat on the visitor port", sh: `{PY} bind 127.0.0.1 3129`},
		{name: "squat on the visitor port on every address", sh: `{PY} bind 0.0.0.0 3129`},
		{name: "squat on the transparent listener's port", sh: `{PY} bind 127.0.0.1 3130`},
		{name: "squat on the transparent listener's port on every address", sh: `{PY} bind 0.0.0.0 3130`},
		{name: "TCP straight to the transparent listener", sh: `{PY} tcp 127.0.0.1 3130`},
		{name: "squat on the resolver's port", sh: `{PY} bind 127.0.0.53 53`},
		{name: "squat on the resolver's port on every address", sh: `{PY} bind 0.0.0.0 53`},
		{name: "squat on the resolver's UDP port", sh: `{PY} bindudp 127.0.0.53 53`},
		{name: "squat on the resolver's UDP port on every address", sh: `{PY} bindudp 0.0.0.0 53`},
		{name: "delete the default route", sh: `ip route del default`},
		{name: "replace the default route", sh: `ip route replace default dev lo`},
		{name: "add a route of one's own", sh: `ip route add 10.213.77.0/24 dev lo`},
	}
	// Every way to name a forbidden place to the proxy, by CONNECT and by
	// an absolute-form GET.
	targets := []string{
		"127.0.0.1:" + lp, "[::1]:" + l6p, "[::ffff:127.0.0.1]:" + lp, "[::ffff:7f00:1]:" + lp, "0.0.0.0:" + lp, "[::]:" + l6p,
		"127.0.0.1:{SSHPORT}", "localhost:" + lp, "LocalHost.:" + lp, "loop.test:" + lp, "own.test:" + hsp,
		hostSide + ":" + hsp, testHost2 + ":80", "private.test:80", "[" + testHost6 + "]:80", "[" + hostSide6 + "]:" + hsp,
		"2130706433:" + lp, "0x7f000001:" + lp, "127.1:" + lp, "0177.0.0.1:" + lp, "017700000001:" + lp,
	}
	for _, target := range targets {
		proxy = append(proxy,
			attempt{name: "CONNECT " + target + " through the proxy", sh: `{PY} proxy 3128 CONNECT ` + shq(target), check: refusedByProxy},
			attempt{name: "GET http://" + target + "/ through the proxy", sh: `{PY} proxy 3128 GET ` + shq("http://"+target+"/"), check: refusedByProxy})
	}
	proxy = append(proxy,
		attempt{name: "GET the allowed host with the Host header of the substrate's loopback", sh: `{PY} proxy 3128 GET http://testhost.test/ "Host: 127.0.0.1:` + lp + `"; exit 1`},
		attempt{name: "DNS rebinding: a name that answers the allowed host, then loopback", sh: `{PY} proxy 3128 CONNECT rebind.test:` + lp + `; {PY} proxy 3128 CONNECT rebind.test:` + lp + `; exit 1`},
		attempt{name: "a name with forbidden and allowed addresses", sh: `{PY} proxy 3128 CONNECT mixed.test:80 | grep -q testhost-2 || echo "did not reach the allowed address"; exit 1`},
	)
	return append(direct, proxy...)
}

func TestEscape_Network(t *testing.T) {
	requireTools(t, "/usr/bin/python3")
	n := startNetwork(t)
	resolver := fakeResolver{
		"testhost.test": fixed(testHost),
		"localhost":     fixed("127.0.0.1", "::1"),
		"loop.test":     fixed("127.0.0.1"),
		"own.test":      fixed(hostSide),
		"private.test":  fixed(testHost2),
		"mixed.test":    fixed("127.0.0.1", testHost2, hostSide, testHost),
	}
	allowed := []netip.Prefix{netip.MustParsePrefix(testHost + "/32")}
	policy := egress.Policy{Mode: egress.Public, AllowCIDRs: allowed}
	forAgents(t, rolloutOptions{network: &config.Network{Agent: policy, Verifier: policy}, resolver: resolver}, func(t *testing.T, agent string, r *rollout) {
		resolver["rebind.test"] = rebinding(testHost, "127.0.0.1")
		// The path works: the allowed host answers through the proxy, so a
		// refusal below is the policy's, not a broken proxy's.
		x := r.sh(r.expand(`{PY} proxy 3128 CONNECT testhost.test:80`, nil))
		require.Equal(t, 0, x.code, x.output())
		require.Contains(t, x.stdout, "testhost-2")
		x = r.sh(r.expand(`{PY} proxy 3128 GET http://testhost.test/`, nil))
		require.Equal(t, 0, x.code, x.output())
		// And so does a direct connection, caught and judged by the same
		// policy, by its address and as an IPv4-mapped one.
		for _, a := range []string{testHost, "::ffff:" + testHost} {
			x = r.sh(r.expand(`{PY} tcp `+a+` 80`, nil))
			require.Equal(t, 0, x.code, x.output())
			require.Contains(t, x.stdout, "testhost-2")
		}
		n.hostHTTP.hits.Store(0)

		before := map[*listener]int64{}
		for _, l := range n.all() {
			before[l] = l.hits.Load()
		}
		abstractBefore := n.abstractHits.Load()

		r.try(t, agent, networkAttempts(n), nil)

		// Whatever the exit codes said, nothing forbidden was reached.
		for _, l := range n.all() {
			if l == n.hostHTTP {
				continue
			}
			got := l.hits.Load() - before[l]
			record(t, "nothing reached "+l.name+" ("+l.addr+")", got == 0, fmt.Sprintf("%d connections or datagrams", got))
		}
		got := n.abstractHits.Load() - abstractBefore
		record(t, "nothing reached the substrate's abstract socket", got == 0, fmt.Sprintf("%d connections", got))
		// The rebinding name reached the test host (the address checked),
		// and the mixed name only the allowed address.
		assert.NotZero(t, n.hostHTTP.hits.Load(), "the allowed host was reached by the names that resolve to it")
	})
}

// TestEscape_Allowlist holds an allowlist agent to its names: no literal,
// no other name, no Host header, no look-alike reaches anything.
func TestEscape_Allowlist(t *testing.T) {
	requireTools(t, "/usr/bin/python3")
	n := startNetwork(t)
	resolver := fakeResolver{"testhost.test": fixed(testHost), "other.test": fixed(testHost2), "evil.testhost.test": fixed(testHost2), "testhost.test.evil": fixed(testHost2)}
	allowed := []netip.Prefix{netip.MustParsePrefix(testHost + "/32"), netip.MustParsePrefix(testHost2 + "/32")}
	policy := egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"testhost.test"}, AllowCIDRs: allowed}
	forAgents(t, rolloutOptions{network: &config.Network{Agent: policy, Verifier: policy}, resolver: resolver}, func(t *testing.T, agent string, r *rollout) {
		x := r.sh(r.expand(`{PY} proxy 3128 CONNECT testhost.test:80`, nil))
		require.Equal(t, 0, x.code, x.output())
		r.try(t, agent, []attempt{
			{name: "CONNECT the allowed host's address literally", sh: `{PY} proxy 3128 CONNECT ` + testHost + `:80`, check: refusedByProxy},
			{name: "CONNECT a name off the list", sh: `{PY} proxy 3128 CONNECT other.test:80`, check: refusedByProxy},
			{name: "CONNECT a subdomain of the allowed name", sh: `{PY} proxy 3128 CONNECT evil.testhost.test:80`, check: refusedByProxy},
			{name: "CONNECT the allowed name with a suffix", sh: `{PY} proxy 3128 CONNECT testhost.test.evil:80`, check: refusedByProxy},
			{name: "GET a name off the list with the allowed Host header", sh: `{PY} proxy 3128 GET http://other.test/ "Host: testhost.test"`, check: refusedByProxy},
			{name: "GET with userinfo naming the allowed host", sh: `{PY} proxy 3128 GET http://testhost.test@other.test/`, check: refusedByProxy},
			{name: "CONNECT the second host's address", sh: `{PY} proxy 3128 CONNECT ` + testHost2 + `:80`, check: refusedByProxy},
		}, nil)
		record(t, "nothing reached the second test host", n.host2HTTP.hits.Load() == 0, fmt.Sprintf("%d connections", n.host2HTTP.hits.Load()))
	})
}
