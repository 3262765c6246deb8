package egress

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// caughtVia serves k on loopback with every connection's original
// destination taken as dst (the rules' part, which pkg/netrules tests with
// a real sandbox), and a dialer that sends the addresses in route to
// loopback upstreams and fails the test on any other.
func caughtVia(t *testing.T, k *Catcher, dst netip.AddrPort, route map[string]string) string {
	t.Helper()
	k.origDst = func(net.Conn) (netip.AddrPort, error) { return dst, nil }
	if k.Proxy.Log == nil {
		k.Proxy.Log = quietLog
	}
	k.Proxy.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		to, ok := route[addr]
		if !ok {
			t.Errorf("the listener dialed %s, which the test did not expect", addr)
			return nil, fmt.Errorf("test refuses to dial %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, to)
	}
	return serveOn(t, func(ctx context.Context, ln net.Listener) error { return k.Serve(ctx, ln) })
}

// Each caught connection is judged by its destination under the policy,
// then dialled to exactly that address; a refusal is a reset, with nothing
// sent first, and is audited with its reason. Under allowlist the name a
// connection carries (TLS server name, HTTP Host) must be allowed and
// answered with the destination (docs/failures.md#a-carried-name-must-match-its-address).
func TestCatcherJudgesByOriginalDestination(t *testing.T) {
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		buf := make([]byte, 4096)
		n, _ := br.Read(buf)
		if n > 0 && buf[0] == 0x16 {
			io.WriteString(c, "upstream got a ClientHello\n")
			return
		}
		line, _, _ := strings.Cut(string(buf[:n]), "\n")
		io.WriteString(c, "upstream got "+line+"\n")
	})
	global := netip.MustParseAddrPort("93.184.215.14:80")
	private := netip.MustParseAddrPort("10.1.2.3:80")
	own := netip.MustParseAddrPort("198.51.100.7:80")
	answers := NewAnswers(0)
	answers.Record("allowed.test", []netip.Addr{global.Addr()}, time.Minute)
	answers.Record("other.test", []netip.Addr{netip.MustParseAddr("93.184.215.15")}, time.Minute)
	answers.Record("also.test", []netip.Addr{netip.MustParseAddr("93.184.215.17")}, time.Minute)
	allow := Policy{Mode: Allowlist, AllowedHosts: []string{"allowed.test", "also.test"}}
	also := netip.MustParseAddrPort("93.184.215.17:443")
	helloAllowed := string(clientHello(t, "allowed.test"))
	for _, tc := range []struct {
		name   string
		policy Policy
		dst    netip.AddrPort
		reason string // "" for allowed
		send   string // the client's first bytes; "" is a line of its own
		reply  string // what an allowed connection gets back
	}{
		{"public, a global address", Policy{Mode: Public}, global, "", "", ""},
		{"public, a private address", Policy{Mode: Public}, private, "blocked-by-address", "", ""},
		{"public, a private address opened with --egress-allow-cidr", Policy{Mode: Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}, private, "", "", ""},
		{"public, the daemon's own address", Policy{Mode: Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}, own, "blocked-by-address", "", ""},
		{"public, loopback: straight to the listener", Policy{Mode: Public, AllowCIDRs: loopback}, netip.MustParseAddrPort("127.0.0.1:3130"), "blocked-by-address", "", ""},
		{"no-network", Policy{Mode: NoNetwork}, global, "blocked-by-policy", "", ""},
		{"allowlist, answered for an allowed name", allow, global, "", "", ""},
		{"allowlist, answered for another name only", allow, netip.MustParseAddrPort("93.184.215.15:80"), "blocked-by-allowlist", "", ""},
		{"allowlist, never answered (an IP literal)", allow, netip.MustParseAddrPort("93.184.215.16:80"), "blocked-by-allowlist", "", ""},
		{"allowlist, Host of the name the address was answered for", allow, global, "", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "upstream got GET / HTTP/1.1\r\n"},
		{"allowlist, Host of a name not allowed, to an allowed address", allow, global, "name-address-mismatch", "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", ""},
		{"allowlist, Host of an allowed name, to another allowed name's address", allow, also, "name-address-mismatch", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", ""},
		{"allowlist, two Host headers", allow, global, "name-address-mismatch", "GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n", ""},
		{"allowlist, SNI of the name the address was answered for", allow, netip.AddrPortFrom(global.Addr(), 443), "", helloAllowed, "upstream got a ClientHello\n"},
		{"allowlist, SNI of an allowed name, to another allowed name's address", allow, also, "name-address-mismatch", helloAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			audit, err := OpenAudit(dir, 0, 0)
			require.NoError(t, err)
			defer audit.Close()
			k := &Catcher{Proxy: Proxy{Policy: tc.policy, Audit: audit, Own: []netip.Addr{own.Addr()}}, Answers: answers}
			addr := caughtVia(t, k, tc.dst, map[string]string{tc.dst.String(): up.addr})
			got, err := sendAndRead(addr, cmp.Or(tc.send, "hello\n"))
			log := auditText(t, dir)
			if tc.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, cmp.Or(tc.reply, "upstream got hello\n"), string(got))
				assert.Contains(t, log, `"verdict":"allow"`)
				assert.Contains(t, log, `"addr":"`+tc.dst.String()+`"`)
				return
			}
			assert.Empty(t, got, "a refused connection got bytes")
			assert.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
			assert.Contains(t, log, `"verdict":"deny"`)
			assert.Contains(t, log, `"reason":"`+tc.reason)
		})
	}
	assert.EqualValues(t, 5, up.conns.Load(), "only the allowed connections reached the upstream")
}

// sendAndRead sends msg on a fresh connection and reads to the end; a
// refused connection may be reset before the dial returns.
func sendAndRead(addr, msg string) ([]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, werr := io.WriteString(c, msg)
	got, err := io.ReadAll(c)
	return got, cmp.Or(werr, err)
}

// auditText waits for the audit's records to be written and returns them.
func auditText(t *testing.T, dir string) string {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		b, _ = os.ReadFile(filepath.Join(dir, "egress.log"))
		return len(b) > 0
	}, 5*time.Second, 5*time.Millisecond)
	return string(b)
}

// The static refusals the rules carry are what every phase refuses by
// address alone: a range one phase may reach is left to the listener.
func TestRefusedRangesAreWhatEveryPhaseRefuses(t *testing.T) {
	has := func(rs []string, want string) bool {
		for _, r := range rs {
			if r == want {
				return true
			}
		}
		return false
	}
	str := func(pols ...Policy) []string {
		var out []string
		for _, r := range refusedRanges(pols...) {
			out = append(out, r.From.String()+"-"+r.To.String())
		}
		return out
	}
	pub := str(Policy{Mode: Public})
	assert.True(t, has(pub, "10.0.0.0-10.255.255.255"), "%v", pub)
	assert.True(t, has(pub, "169.254.0.0-169.254.255.255"), "%v", pub)
	assert.False(t, has(pub, "0.0.0.0-255.255.255.255"))
	assert.Equal(t, []string{"0.0.0.0-255.255.255.255"}, str(Policy{Mode: NoNetwork}))
	opened := str(Policy{Mode: Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}})
	assert.True(t, has(opened, "10.0.0.0-10.0.255.255") && has(opened, "10.2.0.0-10.255.255.255"), "%v", opened)
	// The verifier may reach 10.1/16: the agent's refusal of it is the
	// listener's to make.
	both := str(Policy{Mode: NoNetwork}, Policy{Mode: Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("::ffff:10.1.0.0/112")}})
	assert.Equal(t, opened, both)
}
