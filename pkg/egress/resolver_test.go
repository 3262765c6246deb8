package egress

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// fakeDNS answers A queries for answers on a loopback UDP port.
func fakeDNS(t *testing.T, answers map[string]string) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:n]) != nil || len(m.Questions) != 1 {
				continue
			}
			q := m.Questions[0]
			m.Header.Response = true
			if a, ok := answers[q.Name.String()]; ok && q.Type == dnsmessage.TypeA {
				ip := netip.MustParseAddr(a).As4()
				m.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}, Body: &dnsmessage.AResource{A: ip}}}
			} else if !ok {
				m.Header.RCode = dnsmessage.RCodeNameError
			}
			out, _ := m.Pack()
			pc.WriteTo(out, from)
		}
	}()
	return pc.LocalAddr().String()
}

// The agent's root can rewrite /etc/hosts and /etc/resolv.conf in the
// filesystem it shares with the daemon; the proxies' resolver keeps what
// they said when serve started.
func TestSnapshotResolverIgnoresLaterEdits(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	resolv := filepath.Join(dir, "resolv.conf")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 localhost\n203.0.113.9 pinned.test # a comment\n"), 0o644))
	require.NoError(t, os.WriteFile(resolv, []byte("nameserver 192.0.2.53\n"), 0o644))
	r, err := NewSnapshotResolver(hosts, resolv)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(hosts, []byte("198.51.100.1 pinned.test\n198.51.100.1 allowed.test\n"), 0o644))

	server := fakeDNS(t, map[string]string{"allowed.test.": "203.0.113.20"})
	r.WithServers(server)
	got, err := r.LookupNetIP(context.Background(), "ip", "Pinned.Test.")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("203.0.113.9")}, got)
	got, err = r.LookupNetIP(context.Background(), "ip4", "allowed.test")
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("203.0.113.20")}, got, "the edited hosts file is not read")
	_, err = r.LookupNetIP(context.Background(), "ip", "missing.test")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	assert.True(t, dnsErr.IsNotFound)
}

func TestSnapshotResolverRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "hosts"), 0o644))
	_, err := NewSnapshotResolver(filepath.Join(dir, "hosts"), filepath.Join(dir, "none"))
	assert.ErrorContains(t, err, "not a regular file")
}
