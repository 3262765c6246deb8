package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// TestCaughtConnectionsGoThroughTheUpstreamProxy pins serve behind a
// company proxy: a caught connection to an allowed name is carried by the
// substrate's upstream proxy as CONNECT name:port, so the address the
// sandbox's resolver answered (a test host's that serves nothing) is never
// dialled; a NO_PROXY name is dialled directly; status names the upstream.
func TestCaughtConnectionsGoThroughTheUpstreamProxy(t *testing.T) {
	requireTool(t, "curl")
	// What the company proxy reaches: a server on the substrate's loopback,
	// known to the proxy alone as corp.test.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	hits := serveBanner(ln, "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\ncorp\n")
	port := ln.Addr().(*net.TCPAddr).Port
	proxyAddr, proxyLog := sandboxtest.StartTinyproxy(t, "127.0.0.1", map[string]string{"corp.test": "127.0.0.1"})

	// The sandbox's resolver answers corp.test with an address nothing
	// serves, and direct.test with a test host's.
	host := sandboxtest.NewTestHost(t)
	direct := serveBanner(host.Listen(t, 80), "HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\ndirect\n")
	// A test host that serves nothing: were the upstream skipped, the
	// connection would end there, refused, and never leave the machine.
	unserved := sandboxtest.NewTestHost(t).Addr
	zone := sandboxtest.StartDNSZone(t, func(q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
		a := map[string]netip.Addr{"corp.test.": unserved, "direct.test.": host.Addr}[strings.ToLower(q.Name.String())]
		if !a.IsValid() {
			return dnsmessage.RCodeNameError, nil
		}
		if q.Type != dnsmessage.TypeA {
			return 0, nil
		}
		return 0, []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, Body: &dnsmessage.AResource{A: a.As4()}}}
	})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644))
	snap, err := egress.NewSnapshotResolver(filepath.Join(dir, "hosts"), filepath.Join(dir, "resolv.conf"))
	require.NoError(t, err)
	up, err := egress.UpstreamFromEnv(func(k string) string {
		return map[string]string{"HTTP_PROXY": "http://" + proxyAddr, "HTTPS_PROXY": "http://" + proxyAddr, "NO_PROXY": "direct.test"}[k]
	})
	require.NoError(t, err)

	s := serveForTest(t, config.Config{
		Network: config.Network{Agent: egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"corp.test", "direct.test"},
			AllowCIDRs: []netip.Prefix{netip.PrefixFrom(unserved, 32), netip.PrefixFrom(host.Addr, 32)}}},
		Resolver: snap.WithServers(zone.Addr),
		Upstream: up,
	})
	for _, user := range []string{"root", "1000"} {
		r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("curl -sS --max-time 10 http://corp.test:%d/", port)}, User: user, Dir: "/tmp"}, "")
		assert.Equal(t, "corp\n", r.stdout, "as %s, through the upstream proxy: %s", user, r.stderr)
	}
	assert.EqualValues(t, 2, hits.Load())
	log, _ := os.ReadFile(proxyLog)
	assert.Contains(t, string(log), fmt.Sprintf("CONNECT corp.test:%d", port), "the upstream was asked by name")

	r := s.sh(t, "curl -sS --max-time 10 http://direct.test/")
	assert.Equal(t, "direct\n", r.stdout, "NO_PROXY: dialled directly: %s", r.stderr)
	assert.EqualValues(t, 1, direct.Load())

	st := s.d.Status()
	require.NotNil(t, st.Network.UpstreamProxy)
	assert.Equal(t, "http://"+proxyAddr, st.Network.UpstreamProxy.HTTPSProxy)
	assert.Contains(t, st.Network.UpstreamProxy.Note, "address guard cannot see")
}
