package egress

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

func TestResolvConf(t *testing.T) {
	tests := []struct {
		name, substrate, want string
	}{
		{"docker's", "nameserver 10.0.0.2\nsearch corp.example\noptions ndots:0 edns0\n",
			"nameserver 127.0.0.53\nsearch corp.example\noptions ndots:0 edns0\n"},
		{"kubernetes'", "# generated\nsearch ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
			"nameserver 127.0.0.53\nsearch ns.svc.cluster.local svc.cluster.local\noptions ndots:5\n"},
		{"comments, sortlist and other servers dropped", "nameserver ::1\nnameserver 1.1.1.1 # x\nsortlist 10.0.0.0/8\ndomain  example.org   # d\n",
			"nameserver 127.0.0.53\ndomain example.org\n"},
		{"empty", "", "nameserver 127.0.0.53\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			require.NoError(t, os.WriteFile(path, []byte(tt.substrate), 0o644))
			got, err := ResolvConf(path)
			require.NoError(t, err)
			_, body, ok := strings.Cut(string(got), "\n") // the comment line
			require.True(t, ok)
			assert.Equal(t, tt.want, body)
		})
	}
	got, err := ResolvConf(filepath.Join(t.TempDir(), "missing"))
	require.NoError(t, err, "a substrate without resolv.conf still gets the resolver")
	assert.Contains(t, string(got), "nameserver 127.0.0.53\n")
}

// nsChildEnv marks the re-executed test binary that runs inside the user,
// network and mount namespaces TestDNSResolvConfInNamespace makes.
const nsChildEnv = "SANDBOXD_TEST_DNS_NAMESPACE"

// TestDNSResolvConfInNamespace puts the resolver where the sandbox has it,
// on ResolverAddr in a network namespace of the test's own, with a
// ResolvConf bound over /etc/resolv.conf in a mount namespace of its own,
// and resolves through libc: getent (glibc's NSS) and Python's getaddrinfo,
// and dig with no server named, under each policy. The upstream is the
// test zone in the same namespace.
func TestDNSResolvConfInNamespace(t *testing.T) {
	if os.Getenv(nsChildEnv) == "" {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			sandboxtest.Need(t, "unshare (util-linux)")
		}
		if out, err := exec.Command(unshare, "--user", "--map-root-user", "--net", "--mount", "true").CombinedOutput(); err != nil {
			sandboxtest.Need(t, "user, network and mount namespaces (unshare -rnm: "+strings.TrimSpace(string(out))+")")
		}
		cmd := exec.Command(unshare, "--user", "--map-root-user", "--net", "--mount", "--propagation", "private",
			os.Args[0], "-test.run=^TestDNSResolvConfInNamespace$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), nsChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in the namespace:\n%s", out)
		require.NoError(t, err)
		require.Contains(t, string(out), "--- PASS: TestDNSResolvConfInNamespace")
		return
	}
	for _, tool := range []string{"getent", "python3", "dig", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			sandboxtest.Need(t, tool)
		}
	}
	out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput()
	require.NoError(t, err, "%s", out)

	zone := startZone(t)
	var policy atomic.Pointer[Policy]
	policy.Store(&Policy{Mode: Public})
	s := NewDNSServer(DNSConfig{
		Upstream: &DNSForwarder{Servers: []string{zone.Addr}},
		PolicyFor: func(string, netip.AddrPort) (string, Policy, bool) {
			return "agent", *policy.Load(), true
		},
		Log: quietLog,
	})
	pc, err := net.ListenPacket("udp", ResolverAddr.String())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", ResolverAddr.String())
	require.NoError(t, err)
	serveUntilCleanup(t, func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })

	dir := t.TempDir()
	substrate := filepath.Join(dir, "substrate.conf")
	require.NoError(t, os.WriteFile(substrate, []byte("nameserver 192.0.2.53\nsearch allowed.test\noptions ndots:1 timeout:2 attempts:1\n"), 0o644))
	conf, err := ResolvConf(substrate)
	require.NoError(t, err)
	bound := filepath.Join(dir, "resolv.conf")
	require.NoError(t, os.WriteFile(bound, conf, 0o644))
	require.NoError(t, unix.Mount(bound, "/etc/resolv.conf", "", unix.MS_BIND, ""), "bind over /etc/resolv.conf")

	run := func(argv ...string) (string, error) {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	getaddrinfo := `import socket, sys
try:
    print(" ".join(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 443, proto=socket.IPPROTO_TCP)})))
except socket.gaierror as e:
    print("gaierror", e.args[0]); sys.exit(1)`
	tests := []struct {
		mode   Mode
		argv   []string
		ok     bool
		output string // contained in the output
	}{
		{Public, []string{"getent", "ahosts", "a.test"}, true, "192.0.2.1"},
		{Public, []string{"getent", "ahosts", "a.test"}, true, "2001:db8::1"},
		{Public, []string{"getent", "hosts", "www"}, true, "198.51.100.7"}, // the search line
		{Public, []string{"python3", "-c", getaddrinfo, "a.test"}, true, "192.0.2.1 2001:db8::1"},
		{Public, []string{"dig", "+short", "a.test", "MX"}, true, "10 mail.a.test."},
		{Public, []string{"getent", "hosts", "nowhere.test"}, false, ""},
		{Allowlist, []string{"getent", "ahosts", "allowed.test"}, true, "192.0.2.1"},
		{Allowlist, []string{"python3", "-c", getaddrinfo, "www.allowed.test"}, true, "198.51.100.7"},
		{Allowlist, []string{"getent", "hosts", "a.test"}, false, ""},
		{Allowlist, []string{"python3", "-c", getaddrinfo, "a.test"}, false, "gaierror -2"}, // EAI_NONAME
		{Allowlist, []string{"dig", "a.test"}, true, "status: NXDOMAIN"},
		{NoNetwork, []string{"getent", "hosts", "allowed.test"}, false, ""},
		{NoNetwork, []string{"python3", "-c", getaddrinfo, "allowed.test"}, false, "gaierror"},
		{NoNetwork, []string{"dig", "allowed.test"}, true, "status: REFUSED"},
		// Any server named is answered by the resolver here too; in the
		// sandbox the rules send port 53 everywhere to it.
		{Public, []string{"dig", "@" + ResolverAddr.Addr().String(), "+short", "a.test"}, true, "192.0.2.1"},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode)+" "+strings.Join(tt.argv[:1], " ")+" "+tt.argv[len(tt.argv)-1], func(t *testing.T) {
			pol := Policy{Mode: tt.mode}
			if tt.mode == Allowlist {
				pol = allowTest()
			}
			policy.Store(&pol)
			out, err := run(tt.argv...)
			if tt.ok {
				assert.NoError(t, err, "%s", out)
			} else {
				assert.Error(t, err, "%s", out)
			}
			assert.Contains(t, out, tt.output)
		})
	}
}
