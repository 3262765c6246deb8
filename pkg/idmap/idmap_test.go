package idmap

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The identity map copies the container's own extents, whatever they are
// (docs/failures.md#identity-map-copies-the-extents-of-the-container).
func TestIdentityCopiesOwnExtents(t *testing.T) {
	tests := []struct {
		name, own, want string
	}{
		{"full root", "0 0 4294967295\n", "0 0 4294967295\n"},
		{"userns-remap", "0 100000 65536\n", "0 0 65536\n"},
		{"rootless, two extents", "0 1000 1\n1 100000 65536\n", "0 0 1\n1 1 65536\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse(tc.own)
			require.NoError(t, err)
			assert.Equal(t, tc.want, m.Identity().String())
		})
	}
}

// The map must include the euid and egid bwrap runs as
// (docs/failures.md#identity-map-includes-the-ids-bwrap-runs-as).
func TestIdentityContainsOwnIDs(t *testing.T) {
	m, err := Own("uid")
	require.NoError(t, err)
	assert.True(t, m.Identity().Contains(uint32(os.Geteuid())))
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, in := range []string{"0 0", "a b c", "0 0 99999999999"} {
		_, err := Parse(in)
		assert.Error(t, err, in)
	}
}

func writeEtc(t *testing.T) string {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(
		"root:x:0:0:root:/root:/bin/bash\n"+
			"agent:x:1000:1000::/home/agent:/bin/bash\n"+
			"svc:x:1001:50::/srv:/usr/sbin/nologin\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/group"), []byte(
		"root:x:0:\n"+
			"staff:x:50:\n"+
			"agent:x:1000:\n"+
			"docker:x:999:agent,svc\n"), 0o644))
	return root
}

// `user:group` resolves like Docker does
// (docs/failures.md#user-and-group-resolve-like-docker).
func TestUserGroupResolvesLikeDocker(t *testing.T) {
	root := writeEtc(t)
	tests := []struct {
		spec       string
		uid, gid   uint32
		groups     []uint32
		home, name string
	}{
		{"", 0, 0, nil, "/root", "root"},
		{"root", 0, 0, nil, "/root", "root"},
		{"agent", 1000, 1000, []uint32{999}, "/home/agent", "agent"},
		{"1000", 1000, 1000, []uint32{999}, "/home/agent", "agent"},
		{"1000:1000", 1000, 1000, []uint32{999}, "/home/agent", "agent"},
		{"svc", 1001, 50, []uint32{999}, "/srv", "svc"},
		{"agent:staff", 1000, 50, []uint32{999}, "/home/agent", "agent"},
		{"4242", 4242, 0, nil, "/", ""},         // a bare uid without an entry gets gid 0, not the uid
		{"4242:4242", 4242, 4242, nil, "/", ""}, // unless a group is given
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			u, err := Lookup(root, tc.spec)
			require.NoError(t, err)
			assert.Equal(t, tc.uid, u.UID)
			assert.Equal(t, tc.gid, u.GID)
			assert.Equal(t, tc.groups, u.Groups)
			assert.Equal(t, tc.home, u.Home)
			assert.Equal(t, tc.name, u.Name)
		})
	}
}

func TestLookupUnknownNamesSayWhatToDo(t *testing.T) {
	root := writeEtc(t)
	for _, spec := range []string{"nobody-here", "agent:nogroup", ":50", "agent:"} {
		_, err := Lookup(root, spec)
		require.Error(t, err, spec)
		assert.ErrorIs(t, err, ErrUnknownUser)
	}
}

// A FIFO planted at /etc/passwd must not hang the daemon's user lookups.
func TestLookupRefusesNonRegularFiles(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "etc/passwd"), 0o644))
	done := make(chan error, 1)
	go func() { _, err := Lookup(root, "agent"); done <- err }()
	select {
	case err := <-done:
		assert.ErrorContains(t, err, "not a regular file")
	case <-time.After(5 * time.Second):
		t.Fatal("Lookup hung on a FIFO")
	}
}

// A snapshot resolves users as its files were when it was read: a name
// written into them later is unknown to it, an entry changed later keeps its
// old ids, and a bare uid resolves whatever the files say.
func TestUsersSnapshotIgnoresLaterEdits(t *testing.T) {
	root := writeEtc(t)
	db, err := ReadUsers(root)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(
		"root:x:0:0:root:/root:/bin/bash\n"+
			"agent:x:0:0::/root:/bin/bash\n"+
			"later:x:4242:4343::/:/bin/sh\n"), 0o644))

	_, err = db.Lookup("later")
	assert.ErrorIs(t, err, ErrUnknownUser)
	u, err := db.Lookup("agent")
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{1000, 1000}, [2]uint32{u.UID, u.GID})
	u, err = db.Lookup("4242")
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{4242, 0}, [2]uint32{u.UID, u.GID}, "a bare uid without an entry gets gid 0")
	u, err = db.Lookup("4242:4343")
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{4242, 4343}, [2]uint32{u.UID, u.GID})

	u, err = Lookup(root, "later")
	require.NoError(t, err, "Lookup reads the files anew")
	assert.Equal(t, uint32(4242), u.UID)
}
