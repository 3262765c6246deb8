package tarcopy

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// bigFile is the size of the large-file test's file: 64 MiB, or 1 GiB
// under -tags soak.
var bigFile int64 = 64 << 20

// copyLocal is a copy-out's two halves in one process: Pack as the role
// runs it, Extract as the client does, outside the sandbox.
func copyLocal(t testing.TB, src, dst string, o Options) error {
	t.Helper()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(Pack(pw, src, false, io.Discard)) }()
	err := Extract(pr, dst, false, false, o)
	pr.CloseWithError(io.ErrClosedPipe)
	return err
}

func write(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	require.NoError(t, os.Chmod(p, mode))
}

// owner is the caller: what copies out are owned by without -a.
func owner() Options { return Options{UID: os.Getuid(), GID: os.Getgid()} }

// Harbor's known file-transfer failures, each by name: files dropped, exec
// bits lost, symlinks turned into copies (or lost), empty directories
// dropped. The tree is checked whole, modes and times included.
func TestCopyHarborFailures(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "app/run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(src, "app/data.txt"), "data", 0o640)
	write(t, filepath.Join(src, "app/.hidden"), "dotfile", 0o600)
	require.NoError(t, os.Symlink("run.sh", filepath.Join(src, "app/link-rel")))
	require.NoError(t, os.Symlink("/nonexistent/abs", filepath.Join(src, "app/link-dangling")))
	require.NoError(t, os.MkdirAll(filepath.Join(src, "app/empty/nested-empty"), 0o750))
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(src, "app/data.txt"), old, old))
	require.NoError(t, os.Chtimes(filepath.Join(src, "app/empty"), old, old))

	dst := t.TempDir()
	require.NoError(t, copyLocal(t, filepath.Join(src, "app"), dst, owner()))
	want, got := sandboxtest.Tree(t, filepath.Join(src, "app"), false), sandboxtest.Tree(t, filepath.Join(dst, "app"), false)
	for _, c := range []struct{ failure, name string }{
		{"dropped files", "data.txt"},
		{"dropped files", ".hidden"},
		{"lost exec bits", "run.sh"},
		{"symlinks", "link-rel"},
		{"symlinks", "link-dangling"},
		{"empty directories", "empty"},
		{"empty directories", "empty/nested-empty"},
	} {
		assert.Equal(t, want[c.name], got[c.name], "%s: %s", c.failure, c.name)
	}
	assert.Equal(t, want, got, "the whole tree, modes and times included")
}

// A tree of 10,000 files and a large file arrive with equal checksums.
func TestCopyManyFilesAndALargeOne(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	for i := range 10000 {
		write(t, filepath.Join(src, fmt.Sprintf("d%02d/f%05d", i%100, i)), fmt.Sprintf("file %d\n", i), 0o644)
	}
	big, err := os.Create(filepath.Join(src, "big.bin"))
	require.NoError(t, err)
	_, err = io.CopyN(big, rand.NewChaCha8([32]byte{1}), bigFile)
	require.NoError(t, err)
	require.NoError(t, big.Close())

	dst := t.TempDir()
	start := time.Now()
	require.NoError(t, copyLocal(t, src, dst, owner()))
	t.Logf("10,000 files and %d MiB copied in %v", bigFile>>20, time.Since(start))
	want, got := sandboxtest.Tree(t, src, false), sandboxtest.Tree(t, filepath.Join(dst, "tree"), false)
	assert.Len(t, got, len(want))
	assert.Equal(t, want, got)
}

// docker cp's placement rules, and its errors.
func TestCopyDockerSemantics(t *testing.T) {
	for _, c := range []struct {
		name     string
		src, dst string // relative to the case's src and dst dirs
		setup    func(t *testing.T, dst string)
		want     []string // paths that must exist beneath dst afterwards
		err      error
		errText  string
	}{
		{name: "file to a new name", src: "file", dst: "copy", want: []string{"copy"}},
		{name: "file over a file", src: "file", dst: "existing", setup: func(t *testing.T, d string) { write(t, filepath.Join(d, "existing"), "old", 0o644) }, want: []string{"existing"}},
		{name: "file into a directory", src: "file", dst: "dir", setup: mkdir("dir"), want: []string{"dir/file"}},
		{name: "file to a missing DIR/", src: "file", dst: "missing/", err: ErrDirNotExists},
		{name: "file to FILE/", src: "file", dst: "existing/", setup: func(t *testing.T, d string) { write(t, filepath.Join(d, "existing"), "old", 0o644) }, err: ErrNotDirectory},
		{name: "file/ as a source", src: "file/", dst: "x", err: ErrNotDirectory},
		{name: "directory to a new name", src: "dir", dst: "new", want: []string{"new/inner/f"}},
		{name: "directory into a directory", src: "dir", dst: "there", setup: mkdir("there"), want: []string{"there/dir/inner/f"}},
		{name: "directory contents into a directory", src: "dir/.", dst: "there", setup: mkdir("there"), want: []string{"there/inner/f"}},
		{name: "directory contents to a new name", src: "dir/.", dst: "fresh", want: []string{"fresh/inner/f"}},
		{name: "directory over a file", src: "dir", dst: "existing", setup: func(t *testing.T, d string) { write(t, filepath.Join(d, "existing"), "old", 0o644) }, err: ErrCannotCopyDir},
		{name: "file over a directory", src: "dir/.", dst: "there", setup: func(t *testing.T, d string) {
			require.NoError(t, os.MkdirAll(filepath.Join(d, "there/inner/f"), 0o755))
		}, errText: "cannot overwrite directory"},
		{name: "directory over a file inside", src: "dir/.", dst: "there", setup: func(t *testing.T, d string) { write(t, filepath.Join(d, "there/inner"), "file", 0o644) }, errText: "cannot overwrite non-directory"},
		{name: "missing parent", src: "file", dst: "no/such/place", errText: "no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			write(t, filepath.Join(src, "file"), "content", 0o644)
			write(t, filepath.Join(src, "dir/inner/f"), "inner", 0o644)
			if c.setup != nil {
				c.setup(t, dst)
			}
			err := copyLocal(t, filepath.Join(src, c.src)+suffix(c.src), filepath.Join(dst, c.dst)+suffix(c.dst), owner())
			switch {
			case c.err != nil:
				assert.ErrorIs(t, err, c.err)
			case c.errText != "":
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.errText)
			default:
				require.NoError(t, err)
				for _, w := range c.want {
					assert.FileExists(t, filepath.Join(dst, w))
				}
			}
		})
	}
}

// suffix keeps the trailing "/" or "/." that filepath.Join drops.
func suffix(p string) string {
	switch {
	case strings.HasSuffix(p, "/."):
		return "/."
	case strings.HasSuffix(p, "/"):
		return "/"
	}
	return ""
}

func mkdir(name string) func(t *testing.T, dst string) {
	return func(t *testing.T, dst string) { require.NoError(t, os.MkdirAll(filepath.Join(dst, name), 0o755)) }
}

// archive builds a tar stream from entries, as a hostile side would.
func archive(t testing.TB, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Linkname))
			body := h.Linkname
			h.Linkname = ""
			require.NoError(t, tw.WriteHeader(h))
			_, err := tw.Write([]byte(body))
			require.NoError(t, err)
			continue
		}
		require.NoError(t, tw.WriteHeader(h))
	}
	require.NoError(t, tw.Close())
	return &b
}

// Copying out never writes outside DST, whatever the archive says: no
// symlink it made is followed, `..` and absolute names, devices and FIFOs
// are refused, and setuid/setgid bits are dropped without -a.
func TestCopyNeverWritesOutsideDst(t *testing.T) {
	reg := func(name, body string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Linkname: body}
	}
	for _, c := range []struct {
		name    string
		hdrs    []*tar.Header
		outside string // a path outside dst that must stay untouched, relative to the case's root
	}{
		{"evil -> /etc, then evil/passwd", []*tar.Header{
			{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o755},
			{Typeflag: tar.TypeSymlink, Name: "top/evil", Linkname: "ROOT/etc"},
			reg("top/evil/passwd", "root::0:0::/:/bin/sh\n"),
		}, "etc/passwd"},
		{"../x", []*tar.Header{{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o755}, reg("top/../../x", "escaped")}, "x"},
		{"an absolute name", []*tar.Header{{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o755}, reg("/ROOT/abs", "escaped")}, "abs"},
		{"a hard link out", []*tar.Header{
			{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o755},
			{Typeflag: tar.TypeLink, Name: "top/h", Linkname: "top/../../etc/passwd"},
		}, "etc/passwd"},
		{"a device", []*tar.Header{{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o755}, {Typeflag: tar.TypeChar, Name: "top/mem", Devmajor: 1, Devminor: 1, Mode: 0o666}}, "dst/top/mem"},
		{"a FIFO", []*tar.Header{{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o755}, {Typeflag: tar.TypeFifo, Name: "top/fifo", Mode: 0o666}}, "dst/top/fifo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "etc/passwd"), "original\n", 0o644)
			dst := filepath.Join(root, "dst")
			require.NoError(t, os.Mkdir(dst, 0o755))
			for _, h := range c.hdrs {
				h.Name = strings.ReplaceAll(h.Name, "ROOT", strings.TrimPrefix(root, "/"))
				h.Linkname = strings.ReplaceAll(h.Linkname, "ROOT", root)
			}
			err := Extract(archive(t, c.hdrs...), dst, false, false, owner())
			require.ErrorIs(t, err, ErrRefused)
			if strings.HasPrefix(c.outside, "dst/") {
				assert.NoFileExists(t, filepath.Join(root, c.outside))
				return
			}
			b, rerr := os.ReadFile(filepath.Join(root, c.outside))
			if c.outside == "etc/passwd" {
				require.NoError(t, rerr)
				assert.Equal(t, "original\n", string(b), "the file outside dst is untouched")
			} else {
				assert.Error(t, rerr, "nothing was made outside dst")
			}
		})
	}
}

func TestCopySetuidDroppedUnlessArchive(t *testing.T) {
	for _, archiveMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("archive=%v", archiveMode), func(t *testing.T) {
			dst := t.TempDir()
			o := owner()
			o.Archive = archiveMode
			hdrs := []*tar.Header{
				{Typeflag: tar.TypeDir, Name: "top/", Mode: 0o2775, Uid: os.Getuid(), Gid: os.Getgid()},
				{Typeflag: tar.TypeReg, Name: "top/su", Mode: 0o4755, Linkname: "x", Uid: os.Getuid(), Gid: os.Getgid()},
			}
			require.NoError(t, Extract(archive(t, hdrs...), dst, false, false, o))
			for name, bits := range map[string]os.FileMode{"top/su": os.ModeSetuid, "top": os.ModeSetgid} {
				info, err := os.Stat(filepath.Join(dst, name))
				require.NoError(t, err)
				assert.Equal(t, archiveMode, info.Mode()&bits != 0, "%s: %v", name, info.Mode())
			}
		})
	}
}

// Ownership is the target user's without -a, the archive's with it.
func TestCopyOwnership(t *testing.T) {
	sandboxtest.RequireRoot(t) // chown to another user
	src := t.TempDir()
	write(t, filepath.Join(src, "d/f"), "x", 0o644)
	require.NoError(t, os.Symlink("f", filepath.Join(src, "d/l")))
	for _, p := range []string{"d", "d/f", "d/l"} {
		require.NoError(t, os.Lchown(filepath.Join(src, p), 1234, 5678))
	}
	for _, c := range []struct {
		o        Options
		uid, gid uint32
	}{
		{Options{UID: 1000, GID: 1001}, 1000, 1001},
		{Options{UID: 1000, GID: 1001, Archive: true}, 1234, 5678},
	} {
		dst := t.TempDir()
		require.NoError(t, copyLocal(t, filepath.Join(src, "d"), dst, c.o))
		for _, p := range []string{"d", "d/f", "d/l"} {
			info, err := os.Lstat(filepath.Join(dst, p))
			require.NoError(t, err)
			st := info.Sys().(*syscall.Stat_t)
			assert.Equal(t, [2]uint32{c.uid, c.gid}, [2]uint32{st.Uid, st.Gid}, "%s with %+v", p, c.o)
		}
	}
}

// Outside the sandbox, a DST that is or passes through a symlink is
// refused: the agent can plant one in the shared filesystem.
func TestCopyOutFollowsNoSymlinkInDst(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "src/f"), "x", 0o644)
	require.NoError(t, os.Mkdir(filepath.Join(root, "target"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(root, "target"), filepath.Join(root, "link")))
	for _, dst := range []string{filepath.Join(root, "link"), filepath.Join(root, "link/sub")} {
		err := copyLocal(t, filepath.Join(root, "src"), dst, owner())
		require.Error(t, err, dst)
		assert.Contains(t, err.Error(), "symlink")
	}
	entries, err := os.ReadDir(filepath.Join(root, "target"))
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// `-`: any archive unpacks into an existing directory as it is.
func TestCopyRawArchive(t *testing.T) {
	dst := t.TempDir()
	b := archive(t,
		&tar.Header{Typeflag: tar.TypeReg, Name: "./a", Mode: 0o644, Linkname: "A"},
		&tar.Header{Typeflag: tar.TypeReg, Name: "b/c", Mode: 0o600, Linkname: "C"},
		&tar.Header{Typeflag: tar.TypeLink, Name: "b/hard", Linkname: "b/c"},
	)
	require.NoError(t, Extract(b, dst, true, false, owner()))
	got, err := os.ReadFile(filepath.Join(dst, "b/hard"))
	require.NoError(t, err)
	assert.Equal(t, "C", string(got))
	assert.FileExists(t, filepath.Join(dst, "a"))
	err = Extract(archive(t, &tar.Header{Typeflag: tar.TypeReg, Name: "a", Linkname: "x"}), filepath.Join(dst, "a"), true, false, owner())
	assert.ErrorContains(t, err, "must be a directory")
}

// A local source is read following no symlink in its path: the agent can
// plant one in the filesystem it shares with the substrate, pointing a
// copy into the sandbox at the harness's files. A symlink named as the
// source is copied as the link itself, as docker cp does; inside the
// sandbox's view the path follows symlinks as docker's does.
func TestCopyInFollowsNoSymlinkInLocalSrc(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "secret/key"), "harness", 0o600)
	require.NoError(t, os.Symlink(filepath.Join(root, "secret"), filepath.Join(root, "planted")))
	for _, src := range []string{"planted/key", "planted/.", "planted/"} {
		err := Pack(io.Discard, filepath.Join(root, src)+suffix(src), false, io.Discard)
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), "symlink", src)
	}
	var b bytes.Buffer
	require.NoError(t, Pack(&b, filepath.Join(root, "planted"), false, io.Discard))
	h, err := tar.NewReader(&b).Next()
	require.NoError(t, err)
	assert.Equal(t, byte(tar.TypeSymlink), h.Typeflag)
	assert.Equal(t, filepath.Join(root, "secret"), h.Linkname)

	b.Reset()
	require.NoError(t, Pack(&b, filepath.Join(root, "planted")+"/.", true, io.Discard))
	tr := tar.NewReader(&b)
	var names []string
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names = append(names, h.Name)
	}
	assert.Equal(t, []string{"./", "./key"}, names, "inside, the path follows the sandbox's symlinks")
}
