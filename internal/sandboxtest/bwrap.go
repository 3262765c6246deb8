package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// RecordingBwrap is a bwrap such as an agent that had the root filesystem
// may leave behind: it appends the uid it runs as to the file ran, then
// runs the real bwrap. Pass path as --bwrap (or Config.Bwrap) to see
// whether, and as whom, a command runs the image's bwrap.
func RecordingBwrap(t testing.TB) (path, ran string) {
	t.Helper()
	real, err := exec.LookPath("bwrap")
	require.NoError(t, err)
	dir := t.TempDir()
	path, ran = filepath.Join(dir, "bwrap"), filepath.Join(dir, "ran")
	script := "#!/bin/sh\nid -u >> " + ran + "\nexec " + real + " \"$@\"\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, ran
}
