package daemon

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// serveBanner answers every connection on ln with banner and counts them.
func serveBanner(ln net.Listener, banner string) *atomic.Int64 {
	var hits atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, banner)
			}()
		}
	}()
	return &hits
}

// dialer is a Python loop that connects to addr:80 every 20 ms and logs
// each outcome to the file it is given, until killed.
const dialer = `
import socket, sys, time
addr, log = sys.argv[1], open(sys.argv[2], "a", buffering=1)
while True:
    try:
        s = socket.create_connection((addr, 80), timeout=2)
        log.write("ok " + s.recv(64).decode().strip() + "\n")
        s.close()
    except OSError as e:
        log.write("refused " + type(e).__name__ + "\n")
    time.sleep(0.02)
`

// The verifier's caught connections are judged by the verifier's policy,
// the agent's by the agent's, while an agent process keeps dialling the
// same host throughout grading: a stricter verifier is refused what the
// agent reaches, a looser one reaches what the agent is refused. Neither
// uses a proxy (docs/failures.md#the-verifier-keeps-its-own-policy).
func TestCaughtConnectionsOfTheVerifierAreJudgedByItsPolicy(t *testing.T) {
	requireTool(t, "python3")
	host := sandboxtest.NewTestHost(t)
	hits := serveBanner(host.Listen(t, 80), "testhost\n")
	for _, tc := range []struct {
		name            string
		toml            string
		verifierReaches bool
	}{
		{"a stricter verifier", "[agent]\nnetwork_mode = \"public\"\n[verifier]\nnetwork_mode = \"no-network\"\n", false},
		{"a looser verifier", "[agent]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"public\"\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := fmt.Sprintf(`python3 -c '
import socket
try:
    s = socket.create_connection((%q, 80), timeout=5); print("verifier got", s.recv(64).decode().strip()); r = 1
except OSError as e:
    print("verifier refused", type(e).__name__); r = 0
open("/logs/verifier/reward.txt", "w").write(str(r))'
`, host.Addr.String())
			dir := taskDir(t, tc.toml, script)
			s := serveTask(t, dir, config.Config{}, host.Addr.String()+"/32")
			log := "/tmp/caught-dialer-" + strings.ReplaceAll(tc.name, " ", "-") + ".log"
			r := s.sh(t, fmt.Sprintf("rm -f %s; (python3 -c %s %s %s </dev/null >/dev/null 2>&1 &) ; sleep 0.3; cat %s", log, shQuote(dialer), host.Addr, log, log))
			require.Equal(t, 0, r.exit.Code, r.stderr)
			before := hits.Load()
			v := gradeNow(t, s)
			require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
			got := s.sh(t, "cat "+log+"; pkill -f caught-dialer; rm -f "+log).stdout
			if tc.verifierReaches {
				assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, v.StdoutTail)
				assert.Contains(t, v.StdoutTail, "verifier got testhost")
				assert.NotContains(t, got, "ok ", "the no-network agent reached the host")
				assert.Equal(t, int64(1), hits.Load()-before, "only the verifier's connection arrived")
			} else {
				assert.Equal(t, map[string]float64{"reward": 0}, v.Reward, v.StdoutTail)
				assert.Contains(t, v.StdoutTail, "verifier refused")
				assert.Contains(t, got, "ok testhost", "the public agent's dialer was cut off")
			}
		})
	}
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// A connection to one of the container's own addresses goes to the
// sandbox's loopback on the same port, as under Docker, where
// `curl http://$(hostname):8080` reaches the container's own server; it
// never reaches the substrate's listener on that address
// (docs/failures.md#every-connection-caught).
func TestOwnAddressesReachTheSandboxsLoopback(t *testing.T) {
	requireTool(t, "curl")
	own := ""
	addrs, err := egress.LocalAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if a.Is4() && !a.IsLoopback() {
			own = a.String()
			break
		}
	}
	if own == "" {
		t.Fatal("this machine has no IPv4 address besides loopback")
	}
	substrate, err := net.Listen("tcp", own+":0")
	require.NoError(t, err)
	hits := serveBanner(substrate, "substrate\n")
	port := substrate.Addr().(*net.TCPAddr).Port
	s := serveForTest(t, config.Config{})
	r := s.sh(t, fmt.Sprintf(`python3 -c '
import os, socket
if os.fork() == 0:
    os.setsid()
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", %d)); s.listen(5)
    os.close(0); os.close(1); os.close(2)
    while True:
        c, _ = s.accept(); c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 8\r\n\r\nsandbox\n"); c.close()
' && sleep 0.3 && curl -sS --max-time 10 http://%s:%d/`, port, own, port))
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "sandbox\n", r.stdout)
	assert.Zero(t, hits.Load(), "the substrate's listener on its own address was reached")
}

// The verifier's queries are attributed to it as its connections are: under
// a no-network agent, an allowlist verifier resolves its allowed name and
// reaches it, with no proxy, while the agent's resolver refuses the same
// name (docs/failures.md#the-verifier-keeps-its-own-policy).
func TestVerifierResolvesAndReachesUnderItsOwnAllowlist(t *testing.T) {
	requireTool(t, "python3")
	n := startTestNet(t)
	dir := taskDir(t, "[agent]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"served.test\"]\n",
		`python3 -c '
import socket
try:
    s = socket.create_connection(("served.test", 80), timeout=5); s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("verifier got", s.recv(100).decode().split("\r\n")[-1].strip()); r = 1
except OSError as e:
    print("verifier refused", type(e).__name__); r = 0
open("/logs/verifier/reward.txt", "w").write(str(r))'
`)
	// The name comes from a name server, not the hosts file, which every
	// policy answers: the query's policy is what decides.
	addr := n.allowed.Addr.As4()
	zone := sandboxtest.StartDNSZone(t, func(q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
		if !strings.EqualFold(q.Name.String(), "served.test.") {
			return dnsmessage.RCodeNameError, nil
		}
		if q.Type != dnsmessage.TypeA {
			return 0, nil
		}
		return 0, []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, Body: &dnsmessage.AResource{A: addr}}}
	})
	hosts := filepath.Join(t.TempDir(), "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644))
	res, err := egress.NewSnapshotResolver(hosts, filepath.Join(filepath.Dir(hosts), "resolv.conf"))
	require.NoError(t, err)
	s := serveTask(t, dir, config.Config{Resolver: res.WithServers(zone.Addr)}, n.cidr)
	r := s.sh(t, "getent hosts served.test || echo agent: exit $?")
	assert.Equal(t, "agent: exit 2\n", r.stdout, "the no-network agent's query is refused: %s", r.stderr)
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, v.StdoutTail)
}
