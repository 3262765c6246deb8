package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// Real clients that know nothing of proxies, inside the sandbox, against
// servers on test hosts in network namespaces of the test's own, by name
// (the sandbox's resolver answers from a hosts snapshot that names them):
// every connection is caught and judged by the agent's policy.

// testNet is two test hosts with an HTTP server on :80, a TLS server on
// :443 (a self-signed certificate) and a Redis server on :6379 on the
// first, and the resolver that names them.
type testNet struct {
	allowed, other *sandboxtest.TestHost
	otherHits      *atomic.Int64 // connections that reached the second host
	resolver       *egress.SnapshotResolver
	cidr           string // both hosts, for --egress-allow-cidr
}

func startTestNet(t *testing.T) *testNet {
	t.Helper()
	n := &testNet{allowed: sandboxtest.NewTestHost(t), other: sandboxtest.NewTestHost(t)}
	const page = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\ntesthost\n"
	serveBanner(n.allowed.Listen(t, 80), page)
	n.otherHits = serveBanner(n.other.Listen(t, 80), page)
	serveTLS(t, n.allowed.Listen(t, 443))
	requireTool(t, "redis-server")
	redis := n.allowed.Command("redis-server", "--port", "6379", "--bind", n.allowed.Addr.String(),
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	require.NoError(t, redis.Start())
	t.Cleanup(func() { redis.Process.Kill(); redis.Wait() })
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte(fmt.Sprintf("127.0.0.1 localhost\n%s allowed.test\n%s other.test\n10.99.0.1 private.test\n", n.allowed.Addr, n.other.Addr)), 0o644))
	resolv := filepath.Join(dir, "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, []byte("options ndots:1\n"), 0o644))
	var err error
	n.resolver, err = egress.NewSnapshotResolver(hosts, resolv)
	require.NoError(t, err)
	n.cidr = "10.214.0.0/16"
	return n
}

// serveTLS answers TLS on ln with a self-signed certificate for
// allowed.test, then "tls ok".
func serveTLS(t *testing.T, ln net.Listener) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "allowed.test"}, DNSNames: []string{"allowed.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	serveBanner(tls.NewListener(ln, cfg), "HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\ntls ok\n")
}

// clientCase is one client's attempt and what it must print.
type clientCase struct {
	name, script, want string
}

// clientsUnder runs each case as root and as uid 1000 in a sandbox under
// policy; no proxy variable is set.
func clientsUnder(t *testing.T, n *testNet, network config.Network, cases []clientCase) *served {
	s := serveForTest(t, config.Config{Network: network, Resolver: n.resolver})
	r := s.sh(t, "env | grep -ci _proxy; grep nameserver /etc/resolv.conf")
	require.Equal(t, "0\nnameserver 127.0.0.53\n", r.stdout, "no proxy variable; the sandbox's resolver")
	for _, user := range []string{"root", "1000"} {
		for _, c := range cases {
			t.Run(user+"/"+c.name, func(t *testing.T) {
				script := strings.NewReplacer("{ALLOWED}", n.allowed.Addr.String(), "{OTHER}", n.other.Addr.String()).Replace(c.script)
				r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", script}, User: user, Dir: "/tmp"}, "")
				assert.Equal(t, c.want, r.stdout, "stderr: %s", r.stderr)
			})
		}
	}
	return s
}

// pyConnect prints what a Python socket.create_connection to host:port
// gets: the first line it reads, or the error's name.
const pyConnect = `python3 -c '
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print(s.recv(100).decode().split("\r\n")[-1].strip() or "connected")
except OSError as e:
    print(type(e).__name__)' `

// javaGet runs a one-file Java program that fetches its argument with
// java.net.http.HttpClient and prints the status and body.
const javaGet = `d=$(mktemp -d) && cat > $d/Get.java <<'EOF'
import java.net.URI;
import java.net.http.*;
public class Get {
    public static void main(String[] a) throws Exception {
        HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(a[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.out.println(r.statusCode() + " " + r.body().trim());
    }
}
EOF
java $d/Get.java `

const nodeFetch = `node -e 'fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t.trim()), e => console.log("failed", (e.cause && e.cause.code) || e.message))' `

func TestCaughtClientsUnderPublic(t *testing.T) {
	requireTool(t, "node")
	requireTool(t, "java")
	requireTool(t, "redis-cli")
	n := startTestNet(t)
	s := clientsUnder(t, n, config.Network{
		Agent: egress.Policy{Mode: egress.Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix(n.cidr)}},
	}, []clientCase{
		{"getent hosts", "getent hosts allowed.test | cut -d' ' -f1", n.allowed.Addr.String() + "\n"},
		{"dig", "dig +short +tries=1 +time=3 allowed.test", n.allowed.Addr.String() + "\n"},
		{"java HttpClient", javaGet + "http://allowed.test/", "200 testhost\n"},
		{"python create_connection by name", pyConnect + "allowed.test 80", "testhost\n"},
		{"curl ignoring proxies", "curl -sS --noproxy '*' --max-time 10 http://allowed.test/", "testhost\n"},
		{"node fetch", nodeFetch + "http://allowed.test/", "testhost\n"},
		{"redis-cli by name", "redis-cli -h allowed.test -p 6379 ping", "PONG\n"},
		{"https with SNI, self-signed", "curl -sSk --max-time 10 https://allowed.test/", "tls ok\n"},
		{"a name of a private address not opened: the guard", pyConnect + "private.test 80", "ConnectionRefusedError\n"},
		{"udp is rejected at once", `python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"x", ("{ALLOWED}", 9)); print("sent")
except OSError as e: print(type(e).__name__)'`, "PermissionError\n"},
	})
	// The rejected datagrams are in the audit log, with where they went.
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(s.harness, "audit", "egress.log"))
		return strings.Contains(string(b), `"method":"UDP"`) && strings.Contains(string(b), `"addr":"`+n.allowed.Addr.String()+`:9"`)
	}, 5*time.Second, 20*time.Millisecond, "no audit record of the rejected datagram")
}

func TestCaughtClientsUnderAllowlist(t *testing.T) {
	requireTool(t, "node")
	n := startTestNet(t)
	key, repo := startGitSSH(t, n)
	clientsUnder(t, n, config.Network{
		Agent: egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"allowed.test"}, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix(n.cidr)}},
	}, []clientCase{
		{"python by an allowed name", pyConnect + "allowed.test 80", "testhost\n"},
		{"git clone ssh:// by an allowed name", gitClone(key, "allowed.test", repo), "caught\n"},
		{"git clone ssh:// by a name not allowed", gitClone(key, "other.test", repo), "clone failed\n"},
		{"node fetch of an allowed name", nodeFetch + "http://allowed.test/", "testhost\n"},
		{"https by an allowed name", "curl -sSk --max-time 10 https://allowed.test/", "tls ok\n"},
		{"a name not allowed: NXDOMAIN", "getent hosts nowhere.test || echo exit $?", "exit 2\n"},
		{"a name not allowed, from the hosts file: answered, refused before the handshake", pyConnect + "other.test 80", "ConnectionRefusedError\n"},
		{"an IP literal never answered: refused before the handshake", pyConnect + "{OTHER} 80", "ConnectionRefusedError\n"},
		{"an allowed name sent as Host to another address", "curl -s --max-time 10 -H 'Host: allowed.test' http://{OTHER}/ || echo refused", "refused\n"},
		{"another name sent as Host to the allowed address", "curl -s --max-time 10 -H 'Host: other.test' http://allowed.test/ || echo exit $?", "exit 56\n"},
		{"another name sent as SNI to the allowed address", "curl -sk --max-time 10 --resolve other.test:443:{ALLOWED} https://other.test/ || echo exit $?", "exit 35\n"},
		{"an allowed name as SNI, then another as Host, to the allowed address", "curl -sk --max-time 10 -H 'Host: other.test' https://allowed.test/", "tls ok\n"},
		{"an allowed name sent as SNI to another address", "curl -sk --max-time 10 --resolve allowed.test:443:{OTHER} https://allowed.test/ || echo refused", "refused\n"},
	})
	assert.Zero(t, n.otherHits.Load(), "a connection reached the host that is not allowed")
}

func TestCaughtClientsUnderNoNetwork(t *testing.T) {
	requireTool(t, "dig")
	n := startTestNet(t)
	clientsUnder(t, n, config.Network{
		Agent:    egress.Policy{Mode: egress.NoNetwork},
		Verifier: egress.Policy{Mode: egress.Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix(n.cidr)}},
	}, []clientCase{
		{"python by address", pyConnect + "{ALLOWED} 80", "ConnectionResetError\n"},
		{"curl by address", "curl -s --max-time 10 http://{ALLOWED}/ || echo refused", "refused\n"},
		{"dig is refused", "dig +short +tries=1 +time=3 allowed.test; dig +tries=1 +time=3 allowed.test | grep -o 'status: [A-Z]*'", "status: REFUSED\n"},
		{"dig at another server is answered by the sandbox's", "dig +tries=1 +time=3 @{OTHER} allowed.test | grep -o 'status: [A-Z]*'", "status: REFUSED\n"},
	})
	assert.Zero(t, n.otherHits.Load())
}

// startGitSSH serves a git repository over OpenSSH's sshd on the first
// test host's port 22 and returns the client key (readable by every user:
// the scripts copy it to a file of their own) and the repository's path.
func startGitSSH(t *testing.T, n *testNet) (key, repo string) {
	t.Helper()
	requireTool(t, "git")
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd = "/usr/sbin/sshd"
	}
	dir, err := os.MkdirTemp("", "caught-git-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	hostKey, _ := keyPair(t, dir, "host_key")
	key, pub := keyPair(t, dir, "client_key")
	require.NoError(t, os.Chmod(key, 0o644))
	auth := filepath.Join(dir, "authorized_keys")
	require.NoError(t, os.WriteFile(auth, []byte(pub+"\n"), 0o600))
	repo = filepath.Join(dir, "repo")
	for _, args := range [][]string{{"init", "-q", repo}, {"-C", repo, "-c", "user.email=t@test", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "caught"}} {
		out, err := exec.Command("git", args...).CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	conf := filepath.Join(dir, "sshd_config")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("Port 22\nListenAddress %s\nHostKey %s\nPidFile %s/sshd.pid\nAuthorizedKeysFile %s\n"+
		"PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n",
		n.allowed.Addr, hostKey, dir, auth)), 0o600))
	cmd := n.allowed.Command(sshd, "-D", "-e", "-f", conf)
	cmd.WaitDelay = time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(n.allowed.Addr.String(), "22"), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "sshd on the test host")
	return key, repo
}

// gitClone clones ssh://root@HOST/REPO with a copy of key of the user's
// own and prints the one commit's subject.
func gitClone(key, host, repo string) string {
	return fmt.Sprintf(`k=$(mktemp) && cp %s $k && chmod 600 $k && d=$(mktemp -d) &&
GIT_SSH_COMMAND="ssh -F /dev/null -i $k -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10" \
git clone -q ssh://root@%s%s $d/r 2>/dev/null && git -C $d/r log --format=%%s || echo "clone failed"`, key, host, repo)
}
