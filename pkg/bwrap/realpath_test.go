package bwrap

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RealPath resolves every symlink on the way, keeps a tail that does not
// exist yet, and refuses a symlink to nothing, which making the directory
// would follow (docs/failures.md#hidden-paths-are-resolved-once-at-start).
func TestRealPathResolvesLinksAndKeepsAMissingTail(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	real := filepath.Join(top, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "task"), 0o755))
	require.NoError(t, os.Symlink(real, filepath.Join(top, "link")))
	require.NoError(t, os.Symlink(filepath.Join(top, "nowhere"), filepath.Join(top, "dangling")))

	for in, want := range map[string]string{
		filepath.Join(top, "link", "task"):           filepath.Join(real, "task"),
		filepath.Join(top, "link", "new", "harness"): filepath.Join(real, "new", "harness"),
		filepath.Join(top, "link", "..", "real"):     real,
		filepath.Join(real, "task"):                  filepath.Join(real, "task"),
	} {
		got, err := RealPath(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err = RealPath(filepath.Join(top, "dangling", "harness"))
	assert.ErrorContains(t, err, "a symlink to nothing")
}

// A hidden path that goes through a symlink is refused when the sandbox is
// planned, rather than hidden by the link's name with its target bound
// back beside it, readable.
func TestHidingThroughASymlinkIsRefused(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	real := filepath.Join(top, "ut")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "tests"), 0o755))
	link := filepath.Join(top, "utlink")
	require.NoError(t, os.Symlink(real, link))

	for _, hide := range []string{link, filepath.Join(link, "tests")} {
		_, files, err := buildOptions(Version{0, 8, 0}, &Config{Workdir: "/", Hide: []string{hide}})
		closeAll(files)
		require.Error(t, err, hide)
		assert.Contains(t, err.Error(), "goes through a symlink", hide)
	}
	_, files, err := buildOptions(Version{0, 8, 0}, &Config{Workdir: "/", Hide: []string{real}})
	closeAll(files)
	require.NoError(t, err)
}
