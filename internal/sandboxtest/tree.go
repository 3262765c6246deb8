package sandboxtest

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tree describes every path below root as a copy must keep it — type and
// mode, owner, mtime, a symlink's target, a file's SHA-256 — by relative
// name, for tests that compare a tree with its copy.
func Tree(t testing.TB, root string, owners bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		require.NoError(t, err)
		desc := fmt.Sprintf("%v mtime=%d", info.Mode(), info.ModTime().UnixNano())
		if owners {
			st := info.Sys().(*syscall.Stat_t)
			desc += fmt.Sprintf(" owner=%d:%d", st.Uid, st.Gid)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			desc += " -> " + target
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			require.NoError(t, err)
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			require.NoError(t, err)
			desc += fmt.Sprintf(" sha256=%x", h.Sum(nil))
		}
		out[rel] = desc
		return nil
	}))
	return out
}
