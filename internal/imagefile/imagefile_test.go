package imagefile

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func write(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), mode))
}

func lines(t *testing.T, r *Root, name string, limit int64) ([]string, error) {
	t.Helper()
	var got []string
	done := make(chan error, 1)
	go func() { done <- r.Lines(name, limit, func(l string) { got = append(got, l) }) }()
	select {
	case err := <-done:
		return got, err
	case <-time.After(10 * time.Second):
		t.Fatalf("reading %s did not end", name)
		return nil, nil
	}
}

func openRoot(t *testing.T, dir string) *Root {
	t.Helper()
	r, err := OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// Whatever the agent plants at a name, reading it ends at once: only a
// regular file is read, and only up to the limit.
func TestLinesReadsRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "etc/fifo"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "etc/dir"), 0o755))
	write(t, filepath.Join(dir, "etc/big"), strings.Repeat("line\n", 1000), 0o644)
	r := openRoot(t, dir)

	for _, name := range []string{"/etc/fifo", "/etc/dir"} {
		_, err := lines(t, r, name, 1<<20)
		assert.ErrorIs(t, err, ErrNotRegular, name)
	}
	got, err := lines(t, r, "/etc/missing", 1<<20)
	assert.NoError(t, err, "a missing file has no lines")
	assert.Empty(t, got)
	got, err = lines(t, r, "/etc/big", 12)
	require.NoError(t, err)
	assert.Equal(t, []string{"line", "line", "li"}, got, "no more than the limit is read")

	// Under the daemon's own root, a link to an endless device is refused.
	require.NoError(t, os.Symlink("/dev/urandom", filepath.Join(dir, "etc/urandom")))
	err = Lines(filepath.Join(dir, "etc/urandom"), 1<<30, func(string) {})
	assert.ErrorIs(t, err, ErrNotRegular)
}

// Links resolve inside the root, as they would for a process whose root it
// is: an absolute link or a ".." never reaches the daemon's files.
func TestLinesStayInsideTheRoot(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "etc/real"), "inside\n", 0o644)
	require.NoError(t, os.Symlink("/etc/real", filepath.Join(dir, "etc/absolute")))
	require.NoError(t, os.Symlink("../../../../../../etc/real", filepath.Join(dir, "etc/dotdot")))
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(dir, "etc/outside")))
	r := openRoot(t, dir)
	for _, name := range []string{"/etc/absolute", "/etc/dotdot", "etc/real"} {
		got, err := lines(t, r, name, 1<<20)
		require.NoError(t, err, name)
		assert.Equal(t, []string{"inside"}, got, name)
	}
	got, err := lines(t, r, "/etc/outside", 1<<20)
	assert.NoError(t, err)
	assert.Empty(t, got, "the link names the root's /etc/hostname, which is not there")
}

// A magic link (/proc/self/fd/N) would hand the reader one of the daemon's
// own descriptors: it is never followed, under any root.
func TestLinesRefuseMagicLinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, "daemon-only\n", 0o600)
	f, err := os.Open(secret)
	require.NoError(t, err)
	defer f.Close()
	link := filepath.Join(dir, "passwd")
	require.NoError(t, os.Symlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), link))
	var got []string
	err = Lines(link, 1<<20, func(l string) { got = append(got, l) })
	assert.ErrorIs(t, err, unix.ELOOP)
	assert.Empty(t, got)
}

// Executable looks at a program without opening it for reading: a FIFO, a
// directory or a file without an execute bit is no program.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "bin/prog"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "bin/data"), "", 0o644)
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "bin/fifo"), 0o777))
	require.NoError(t, os.Symlink("prog", filepath.Join(dir, "bin/link")))
	r := openRoot(t, dir)
	for name, want := range map[string]bool{
		"/bin/prog": true, "/bin/link": true,
		"/bin/data": false, "/bin/fifo": false, "/bin": false, "/bin/missing": false,
	} {
		done := make(chan bool, 1)
		go func() { done <- r.Executable(name) }()
		select {
		case got := <-done:
			assert.Equal(t, want, got, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("Executable(%s) did not return", name)
		}
	}
}

func TestHosts(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "etc/hosts"), strings.Join([]string{
		"127.0.0.1 localhost # loopback",
		"::ffff:10.0.0.1 Mapped.Test.",
		"10.0.0.2 db db.internal",
		"10.0.0.3 db",
		"# 10.9.9.9 commented",
		"not-an-address name",
		"10.0.0.4",
	}, "\n"), 0o644)
	h, err := openRoot(t, dir).Hosts("/etc/hosts", 1<<20)
	require.NoError(t, err)
	a := netip.MustParseAddr
	assert.Equal(t, map[string][]netip.Addr{
		"localhost":   {a("127.0.0.1")},
		"mapped.test": {a("10.0.0.1")},
		"db":          {a("10.0.0.2"), a("10.0.0.3")},
		"db.internal": {a("10.0.0.2")},
	}, h)
}
