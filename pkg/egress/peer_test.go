package egress

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A peer's target is resolved once, from the start-time snapshot: rewriting
// the hosts file afterwards (what the agent's root can do to the shared
// /etc/hosts) changes nothing, and an address literal needs no lookup.
func TestResolvePeerUsesTheStartTimeSnapshot(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("10.1.2.3 db.test\n::1 v6.test\n"), 0o644))
	snap, err := NewSnapshotResolver(hosts, filepath.Join(t.TempDir(), "no-resolv.conf"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 db.test\n"), 0o644))

	ctx := context.Background()
	for target, want := range map[string]string{
		"db.test:5432":        "10.1.2.3:5432",
		"DB.test.:5432":       "10.1.2.3:5432",
		"v6.test:80":          "[::1]:80",
		"127.0.0.1:6379":      "127.0.0.1:6379",
		"[::1]:19200":         "[::1]:19200",
		"[::ffff:10.0.0.1]:1": "10.0.0.1:1",
	} {
		got, err := ResolvePeer(ctx, snap, target)
		require.NoError(t, err, target)
		assert.Equal(t, netip.MustParseAddrPort(want), got, target)
	}
}

// A target that is malformed, or names nothing before ctx ends, is an error
// that says so; a name is asked for again until then.
func TestResolvePeerFailsClosed(t *testing.T) {
	r := resolverOf()
	for _, target := range []string{"db.test", "db.test:0", "db.test:http", "db.test:70000"} {
		_, err := ResolvePeer(context.Background(), r, target)
		assert.Error(t, err, target)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*peerRetry)
	defer cancel()
	_, err := ResolvePeer(ctx, r, "nowhere.test:5432")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	assert.GreaterOrEqual(t, r.count("nowhere.test"), 2, "a name not there yet is asked for again")

	late := resolverOf()
	late.answer = func(host string, call int) ([]netip.Addr, error) {
		if call < 3 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ResolvePeer(ctx, late, "db.test:5432")
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddrPort("10.0.0.7:5432"), got)
}
