package daemon

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// privateHostsEnv names the file bound over /etc/hosts in the mount
// namespace that TestPeerTargetIsNotRedirectedByRewrittenHosts re-runs in.
const privateHostsEnv = "SANDBOXD_TEST_PRIVATE_HOSTS"

// answer serves line on addr to every connection, until the test ends.
func answer(t *testing.T, addr, line string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	sandboxtest.ServeLine(t, ln, line)
}

// The agent's root shares /etc with the daemon: it can rename /etc and make a
// new one, or rewrite /etc/hosts, so that the name of a peer's target points
// at another substrate service on loopback (reachable even under
// no-network, through the peer). The target is resolved once, at start, and
// every connection goes to that address.
//
// The test rewrites a hosts file of its own, bound over /etc/hosts in a mount
// namespace that only a re-run of this test lives in: the machine's
// /etc/hosts is never touched.
func TestPeerTargetIsNotRedirectedByRewrittenHosts(t *testing.T) {
	hostsFile := os.Getenv(privateHostsEnv)
	if hostsFile == "" {
		sandboxtest.RequireRoot(t)
		requireTool(t, "unshare")
		hostsFile = filepath.Join(t.TempDir(), "hosts")
		require.NoError(t, os.WriteFile(hostsFile, nil, 0o644))
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--",
			os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), privateHostsEnv+"="+hostsFile)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: "+t.Name(), "%s", out)
		return
	}
	require.NoError(t, unix.Mount(hostsFile, "/etc/hosts", "", unix.MS_BIND, ""))

	// The declared service and the one the agent would rather reach, on the
	// same port of two loopback addresses.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	answer(t, fmt.Sprintf("127.0.0.1:%d", port), "declared")
	answer(t, fmt.Sprintf("127.0.0.2:%d", port), "substrate-secret")
	require.NoError(t, os.WriteFile("/etc/hosts", []byte("127.0.0.1 localhost\n127.0.0.1 service.test\n"), 0o644))

	s := serveForTest(t, config.Config{Network: config.Network{
		Agent: egress.Policy{Mode: egress.NoNetwork},
		Peers: []config.Peer{{Name: "db", Port: 5432, Target: fmt.Sprintf("service.test:%d", port)}},
	}})
	// What the agent's root does once it runs: the same file, rewritten.
	require.NoError(t, os.WriteFile("/etc/hosts", []byte("127.0.0.1 localhost\n127.0.0.2 service.test\n"), 0o644))

	r := s.exec(t, execPython(`import socket; s = socket.create_connection(("db", 5432), 10); print(s.makefile().readline().strip())`), "")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "declared\n", r.stdout, "the peer was redirected by the rewritten hosts file")
}

// A peer whose target does not resolve when serve starts fails the start,
// and says which peer and what to do, rather than serving a name that the
// agent's hosts file could later define.
func TestPeerTargetThatDoesNotResolveFailsStart(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	defer func(w time.Duration) { peerResolveWait = w }(peerResolveWait)
	peerResolveWait = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := start(ctx, config.Config{
		HarnessDir: sandboxtest.HarnessDir(t),
		Network: config.Network{
			Agent: egress.Policy{Mode: egress.NoNetwork},
			Peers: []config.Peer{{Name: "db", Port: 5432, Target: "nowhere.test:5432"}},
		},
		Resolver: fakeResolver{},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx) }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatal("serve started with a peer whose target does not resolve")
	}
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), `peer "db"`) && strings.Contains(err.Error(), "nowhere.test"), err.Error())
}
