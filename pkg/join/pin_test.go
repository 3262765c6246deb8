package join

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// While a program runs from a file, no one may open it for writing: that is
// what lets Pin leave the sealed copy for after the start
// (docs/failures.md#the-pinned-copy-is-made-once-serve-serves).
func TestARunningProgramsFileRefusesWriters(t *testing.T) {
	own, err := os.Open("/proc/self/exe")
	require.NoError(t, err)
	defer own.Close()
	assert.True(t, writesRefused(own), "this test's own binary")

	dir := t.TempDir()
	sleep := filepath.Join(dir, "sleep")
	data, err := os.ReadFile("/bin/sleep")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sleep, data, 0o755))
	f, err := os.Open(sleep)
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, writesRefused(f), "a file no program runs from")

	cmd := exec.Command(sleep, "30")
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var fs unix.Statfs_t
	require.NoError(t, unix.Fstatfs(int(f.Fd()), &fs))
	if localFilesystems[int64(fs.Type)] {
		assert.True(t, writesRefused(f), "the same file while a program runs from it")
	} else {
		// A container's root here can be fuseblk: no refusal is taken
		// from it, and the copy is made at start.
		assert.False(t, writesRefused(f), "a running program's file on a filesystem of type %#x, not listed", fs.Type)
	}
	after, err := os.ReadFile(sleep)
	require.NoError(t, err)
	assert.Equal(t, data, after, "the check itself writes nothing")
}
