package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// fakeResolver maps test names to loopback; everything else does not exist.
type fakeResolver map[string]string

func (f fakeResolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	if a, ok := f[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func upstream(t *testing.T, body string) (port int) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is needed for this test: run scripts/deps.sh test", name)
	}
}

var loopbackOnly = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// The allowlist agent reaches its one host through the proxy with a real
// curl and is refused another; plain HTTP is filtered like CONNECT
// (docs/failures.md#plain-http-filtered-like-connect).
func TestEgress_AllowlistWithRealCurl(t *testing.T) {
	requireTool(t, "curl")
	port := upstream(t, "hello from upstream")
	s := serveForTest(t, config.Config{
		Network: config.Network{
			Agent:    egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"allowed.test"}, AllowCIDRs: loopbackOnly},
			ProxyEnv: true,
		},
		Resolver: fakeResolver{"allowed.test": "127.0.0.1", "refused.test": "127.0.0.1"},
	})
	r := s.sh(t, fmt.Sprintf("curl -sS --max-time 10 http://allowed.test:%d/", port))
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "hello from upstream", r.stdout)

	r = s.sh(t, fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}' --max-time 10 http://refused.test:%d/", port))
	assert.Equal(t, "403", r.stdout)
	r = s.sh(t, fmt.Sprintf("curl -sS -D - -o /dev/null --max-time 10 http://refused.test:%d/ | tr -d '\\r' | grep -i x-proxy-error", port))
	assert.Equal(t, "X-Proxy-Error: blocked-by-allowlist\n", r.stdout)
}

// Non-global addresses are refused under public too, unless a range is
// opened deliberately
// (docs/failures.md#non-global-destinations-refused-even-under-public).
func TestPublicStillRefusesLoopbackUpstream(t *testing.T) {
	requireTool(t, "curl")
	port := upstream(t, "should not be reached")
	s := serveForTest(t, config.Config{
		Network:  config.Network{Agent: egress.Policy{Mode: egress.Public}, ProxyEnv: true},
		Resolver: fakeResolver{"sneaky.test": "127.0.0.1"},
	})
	r := s.sh(t, fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}' --max-time 10 http://sneaky.test:%d/", port))
	assert.Equal(t, "403", r.stdout)
	r = s.sh(t, fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}' --max-time 10 http://127.0.0.1:%d/", port))
	// 127.0.0.1 is in no_proxy: the request goes to the sandbox's own loopback, where nothing listens.
	assert.Equal(t, "000", r.stdout)
	r = s.sh(t, fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}' --noproxy '' -x http://127.0.0.1:3128 --max-time 10 http://127.0.0.1:%d/", port))
	assert.Equal(t, "403", r.stdout, "the proxy refuses the substrate's loopback by address")
}

// Under no-network nothing listens on the proxy port and no proxy variable
// is set (docs/failures.md#no-network-means-no-proxy-variables).
func TestNoNetworkHasNoProxy(t *testing.T) {
	s := serveForTest(t, config.Config{Network: config.Network{Agent: egress.Policy{Mode: egress.NoNetwork}}})
	r := s.sh(t, "env | grep -i _proxy || echo none")
	assert.Equal(t, "none\n", r.stdout)
	r = s.exec(t, execPython("import socket\ntry:\n  socket.create_connection(('127.0.0.1',3128),2); print('open')\nexcept OSError as e: print('closed')"), "")
	assert.Equal(t, "closed\n", r.stdout)
}

// Direct connections never leave unjudged: the sandbox's 127.0.0.1 is its
// own, a connection to an address every phase refuses (198.18.0.0/15,
// benchmarking) is refused before the handshake, IPv4-mapped included,
// UDP other than DNS is rejected at once, and nothing reaches the
// substrate's listener (docs/failures.md#every-connection-caught).
func TestDirectConnectionsFail(t *testing.T) {
	// A listener on the substrate's loopback: the sandbox's 127.0.0.1 is its own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := serveForTest(t, config.Config{Network: config.Network{Agent: egress.Policy{Mode: egress.Public}}})
	script := fmt.Sprintf(`
import socket
def tcp(addr, fam=socket.AF_INET):
    try:
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect(addr); return "connected"
    except OSError as e: return type(e).__name__
def udp(addr):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", addr); return "sent"
    except OSError as e: return type(e).__name__
print(tcp(("127.0.0.1", %d)))
print(tcp(("198.18.0.1", 80)))
print(tcp(("::ffff:198.18.0.1", 80, 0, 0), socket.AF_INET6))
print(udp(("198.18.0.1", 9)))
try:
    socket.getaddrinfo("example.invalid", 80); print("resolved")
except OSError as e: print("no-dns")
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print("raw")
except OSError as e: print(type(e).__name__)
`, port)
	r := s.exec(t, execPython(script), "")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "ConnectionRefusedError\nConnectionRefusedError\nConnectionRefusedError\nPermissionError\nno-dns\nPermissionError\n", r.stdout)
	ln.(*net.TCPListener).SetDeadline(time.Now())
	_, err = ln.Accept()
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a connection reached the substrate's loopback")
}

// The visitor port is held by sandboxd from the start: the agent can neither
// use it without a visit's token nor take it
// (docs/failures.md#visitor-port-held-and-token-guarded).
func TestAgentCannotUseOrTakeVisitorPort(t *testing.T) {
	requireTool(t, "curl")
	port := upstream(t, "secret")
	s := serveForTest(t, config.Config{
		Network:  config.Network{Agent: egress.Policy{Mode: egress.Public, AllowCIDRs: loopbackOnly}},
		Resolver: fakeResolver{"up.test": "127.0.0.1"},
	})
	r := s.sh(t, fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}' -x http://127.0.0.1:3129 --max-time 10 http://up.test:%d/", port))
	assert.Contains(t, []string{"403", "407"}, r.stdout)
	r = s.exec(t, execPython("import socket\ns=socket.socket()\ntry:\n  s.bind(('127.0.0.1',3129)); print('bound')\nexcept OSError as e: print(e.errno)"), "")
	assert.Equal(t, "98\n", r.stdout, "EADDRINUSE: sandboxd holds the port")

	// A visit's token works while the visit is open, and only then.
	env, done := s.d.net.OpenVisit(egress.Policy{Mode: egress.Public, AllowCIDRs: loopbackOnly})
	req := execPython(fmt.Sprintf("import urllib.request\nprint(urllib.request.urlopen('http://up.test:%d/', timeout=10).read().decode())", port))
	req.Env = env
	r = s.exec(t, req, "")
	assert.Equal(t, "secret\n", r.stdout, r.stderr)
	done()
	r = s.exec(t, req, "")
	assert.NotEqual(t, 0, r.exit.Code, "the token is dead once the visit ends")
}

// A peer is reached by name with the real client; it is listed in no_proxy
// one by one and added to the substrate's hosts file
// (docs/failures.md#peers-listed-one-by-one).
func TestPeerReachedByNameWithRedisCLI(t *testing.T) {
	requireTool(t, "redis-server")
	requireTool(t, "redis-cli")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	redis := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, redis.Start())
	t.Cleanup(func() { redis.Process.Kill(); redis.Wait() })
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)

	s := serveForTest(t, config.Config{Network: config.Network{
		Agent:    egress.Policy{Mode: egress.Public},
		ProxyEnv: true,
		Peers:    []config.Peer{{Name: "cache", Port: 6379, Target: fmt.Sprintf("127.0.0.1:%d", port)}, {Name: "squatter", Port: 3128, Target: fmt.Sprintf("127.0.0.1:%d", port)}},
	}})
	r := s.sh(t, "redis-cli -h cache -p 6379 ping; redis-cli -h squatter -p 3128 ping; echo $no_proxy; grep -c localhost /etc/hosts; grep -E 'cache|squatter' /etc/hosts")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 6, r.stdout)
	assert.Equal(t, "PONG", lines[0])
	assert.Equal(t, "PONG", lines[1], "a peer on a reserved port moves to the next 127.0.0.N")
	assert.Equal(t, "localhost,127.0.0.1,::1,cache,squatter,127.0.0.2", lines[2])
	assert.NotEqual(t, "0", lines[3], "the substrate's hosts entries are kept")
	assert.Equal(t, "127.0.0.1\tcache", lines[4])
	assert.Equal(t, "127.0.0.2\tsquatter", lines[5])
}

func execPython(script string) (req control.Request) {
	return control.Request{Argv: []string{"/usr/bin/python3", "-c", script}}
}

func controlReq(argv ...string) control.Request { return control.Request{Argv: argv} }
