package sshd_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Files move in and out through sandboxd's own file server (pkg/sftpd) on
// an image without OpenSSH's sftp-server, scp or sftp (imageFileServers are
// hidden from the sandbox's view), as a non-root agent user, with every
// client harnesses use: OpenSSH's scp (SFTP and -O), sftp, paramiko (SFTP
// and its scp module) and asyncssh (SFTP and scp).

// transferSize is the file every client moves: 64 MiB, or 1 GiB with
// SANDBOXD_TEST_1GIB=1 (make bench moves 1 GiB too).
func transferSize() int64 {
	if os.Getenv("SANDBOXD_TEST_1GIB") == "1" {
		return 1 << 30
	}
	return 64 << 20
}

// filesServer is a served sandbox without the image's file servers, whose
// agent is 1000:1000, with a directory of the substrate's hidden from its
// view and an "escape" link (and "escapedir") in the workdir pointing into it.
type filesServer struct {
	*testServer
	hidden string // a substrate directory the agent may read there, absent in the view
	local  string // the client's side
}

func startFilesServer(t *testing.T) *filesServer {
	t.Helper()
	hidden, err := os.MkdirTemp("", "sandboxd-hidden-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(hidden) })
	require.NoError(t, os.Chmod(hidden, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hidden, "secret.txt"), []byte("substrate secret\n"), 0o644))
	ts := startServer(t, options{user: "1000:1000", hide: append([]string{hidden}, imageFileServers...)})
	r := ts.sb.Sh(t, "1000:1000", fmt.Sprintf("cd %s && ln -s %s/secret.txt escape && ln -s %s escapedir && ! test -e /usr/bin/scp && ! test -e /usr/lib/openssh/sftp-server", ts.workdir, hidden, hidden))
	require.Equal(t, 0, r.Code, "the sandbox's view has the links and no OpenSSH file servers: %s", r.Stderr)
	return &filesServer{testServer: ts, hidden: hidden, local: t.TempDir()}
}

// randomFile writes size random bytes at path and returns their SHA-256.
func randomFile(t testing.TB, path string, size int64) string {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	h := sha256.New()
	_, err = io.CopyN(io.MultiWriter(f, h), rand.Reader, size)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return hex.EncodeToString(h.Sum(nil))
}

// owner is a file's uid:gid, without following a symlink.
func owner(t testing.TB, path string) string {
	t.Helper()
	st, err := os.Lstat(path)
	require.NoError(t, err)
	sys := st.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", sys.Uid, sys.Gid)
}

func (fs *filesServer) base() []string {
	return append(fs.sshOpts(fs.agentKey), "-P", fs.port)
}

// sftpBatch runs OpenSSH's sftp with a batch of commands; a failing
// command fails the batch unless it starts with "-".
func (fs *filesServer) sftpBatch(t *testing.T, commands ...string) result {
	t.Helper()
	batch := filepath.Join(t.TempDir(), "batch")
	require.NoError(t, os.WriteFile(batch, []byte(strings.Join(commands, "\n")+"\n"), 0o644))
	return run(t, exec.Command("sftp", append(fs.base(), "-b", batch, "agent@127.0.0.1")...), "")
}

func python(t *testing.T, module string) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import "+module).Run(); err != nil {
		requireTool(t, "python3-"+module+"-missing", "python3-"+module)
	}
	return python
}

// pythonChecks asserts that a testdata/ssh script exited 0 and printed
// "ok NAME" for every check.
func pythonChecks(t *testing.T, r result, checks ...string) {
	t.Helper()
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, c := range checks {
		assert.Contains(t, strings.Split(r.stdout, "\n"), "ok "+c)
	}
}

func TestFilesInAndOutWithEveryClient(t *testing.T) {
	requireTool(t, "scp", "openssh-client")
	requireTool(t, "sftp", "openssh-client")
	fs := startFilesServer(t)
	src := filepath.Join(fs.local, "src.bin")
	want := randomFile(t, src, transferSize())
	back := filepath.Join(fs.local, "back")
	require.NoError(t, os.Mkdir(back, 0o755))
	// asyncssh 2.10 loses the connection at the first rekey during a
	// transfer, and x/crypto/ssh rekeys after 1 GiB each way (the README's
	// known gaps): its share of a 1 GiB run is smaller, 256 MiB.
	asyncSrc, asyncWant := src, want
	if transferSize() > 256<<20 {
		asyncSrc = filepath.Join(fs.local, "src-asyncssh.bin")
		asyncWant = randomFile(t, asyncSrc, 256<<20)
	}

	for _, tc := range []struct {
		name  string
		moved []string // names in the workdir and in back
		want  string   // their SHA-256, when not src's
		run   func(t *testing.T)
	}{
		{"openssh-scp", []string{"scp.bin"}, "", func(t *testing.T) {
			r := run(t, exec.Command("scp", append(fs.base(), src, "agent@127.0.0.1:scp.bin")...), "")
			require.Equal(t, 0, r.code, "scp up: %s", r.stderr)
			r = run(t, exec.Command("scp", append(fs.base(), "agent@127.0.0.1:scp.bin", back)...), "")
			require.Equal(t, 0, r.code, "scp down: %s", r.stderr)
		}},
		{"openssh-scp-legacy", []string{"scp-legacy.bin"}, "", func(t *testing.T) {
			r := run(t, exec.Command("scp", append(fs.base(), "-O", src, "agent@127.0.0.1:scp-legacy.bin")...), "")
			require.Equal(t, 0, r.code, "scp -O up: %s", r.stderr)
			r = run(t, exec.Command("scp", append(fs.base(), "-O", "agent@127.0.0.1:scp-legacy.bin", back)...), "")
			require.Equal(t, 0, r.code, "scp -O down: %s", r.stderr)
		}},
		{"openssh-sftp", []string{"sftp.bin"}, "", func(t *testing.T) {
			r := fs.sftpBatch(t, "put "+src+" sftp.bin", "get sftp.bin "+back+"/sftp.bin")
			require.Equal(t, 0, r.code, r.stderr)
		}},
		{"paramiko", []string{"paramiko-sftp.bin", "paramiko-scp.bin"}, "", func(t *testing.T) {
			py := python(t, "paramiko")
			python(t, "scp")
			r := run(t, exec.Command(py, "-W", "ignore", "../../testdata/ssh/files_paramiko.py", "127.0.0.1", fs.port, fs.agentKey, src, back), "")
			pythonChecks(t, r, "sftp-put-get", "scp-put-get", "symlink-lstat-readlink", "escape-not-followed")
		}},
		{"asyncssh", []string{"asyncssh-sftp.bin", "asyncssh-scp.bin"}, asyncWant, func(t *testing.T) {
			py := python(t, "asyncssh")
			tree := filepath.Join(fs.local, "empty-tree")
			require.NoError(t, os.MkdirAll(tree, 0o755))
			r := run(t, exec.Command(py, "-W", "ignore", "../../testdata/ssh/files_asyncssh.py", "127.0.0.1", fs.port, fs.agentKey, asyncSrc, tree, back), "")
			pythonChecks(t, r, "sftp-put-get", "scp-put-get", "statvfs")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t)
			sum := want
			if tc.want != "" {
				sum = tc.want
			}
			for _, name := range tc.moved {
				in := filepath.Join(fs.workdir, name)
				assert.Equal(t, sum, sha(t, in), "%s in the sandbox", name)
				assert.Equal(t, "1000:1000", owner(t, in), "%s is the agent user's", name)
				assert.Equal(t, sum, sha(t, filepath.Join(back, name)), "%s back out", name)
			}
		})
	}
}

// entry is what a tree comparison looks at of one path.
type entry struct {
	Kind  string      // file, dir, link
	Perm  os.FileMode // permissions with setuid, setgid and sticky; none for a link
	Link  string      // a link's target
	Sum   string      // a file's SHA-256
	MTime int64       // a file's mtime in seconds
}

// snapshot describes the tree below root by relative path. With follow,
// links are described as what they point at, as scp copies them.
func snapshot(t *testing.T, root string, follow bool) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	var walk func(rel string)
	walk = func(rel string) {
		p := filepath.Join(root, rel)
		st, err := os.Lstat(p)
		require.NoError(t, err)
		if follow && st.Mode()&os.ModeSymlink != 0 {
			st, err = os.Stat(p)
			require.NoError(t, err)
		}
		e := entry{Perm: st.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			e.Kind, e.Perm = "link", 0
			e.Link, err = os.Readlink(p)
			require.NoError(t, err)
		case st.IsDir():
			e.Kind = "dir"
			names, err := os.ReadDir(p)
			require.NoError(t, err)
			for _, n := range names {
				walk(filepath.Join(rel, n.Name()))
			}
		default:
			e.Kind, e.Sum, e.MTime = "file", sha(t, p), st.ModTime().Unix()
		}
		if rel != "." {
			out[rel] = e
		}
	}
	walk(".")
	return out
}

// makeTree is a tree with what harnesses lose: empty directories, modes
// (executable, private, read-only), old times, an empty file, and a
// symlink. (OpenSSH's scp refuses a link to a directory in SFTP mode, on
// its side.)
func makeTree(t *testing.T, root string) {
	t.Helper()
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"empty", 0o755}, {"private", 0o750}, {"bin", 0o755}, {"deep/er/est", 0o700}} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d.path), 0o755))
		require.NoError(t, os.Chmod(filepath.Join(root, d.path), d.mode))
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
		data string
	}{
		{"data.txt", 0o644, "data\n"}, {"ro.txt", 0o444, "read only\n"}, {"bin/run.sh", 0o755, "#!/bin/sh\necho run\n"},
		{"private/secret.txt", 0o600, "mine\n"}, {"deep/er/est/leaf", 0o640, "leaf\n"}, {"zero", 0o644, ""},
	} {
		p := filepath.Join(root, f.path)
		require.NoError(t, os.WriteFile(p, []byte(f.data), 0o600))
		require.NoError(t, os.Chmod(p, f.mode))
		require.NoError(t, os.Chtimes(p, old, old))
	}
	require.NoError(t, os.Symlink("data.txt", filepath.Join(root, "link-file")))
}

// agentOwnsAll asserts that every path below root is the agent user's.
func agentOwnsAll(t *testing.T, root string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		require.NoError(t, err)
		assert.Equal(t, "1000:1000", owner(t, p), "%s is the agent user's", p)
		return nil
	}))
}

func TestTreesKeepModesLinksAndEmptyDirectories(t *testing.T) {
	requireTool(t, "scp", "openssh-client")
	fs := startFilesServer(t)
	tree := filepath.Join(fs.local, "tree")
	makeTree(t, tree)
	back := filepath.Join(fs.local, "back")
	require.NoError(t, os.Mkdir(back, 0o755))
	followed := snapshot(t, tree, true)

	for _, tc := range []struct {
		name string
		want map[string]entry // of the copy inside and of the copy back
		run  func(t *testing.T, remote string)
	}{
		// Every client copies what a link points at: scp always, and
		// asyncssh when told to (its copy of a link as a link sets the
		// link's mode on its target, through SETSTAT, as it would with
		// OpenSSH's server). Links as links: TestSFTPExtensionsAsOpenSSH
		// and the Python scripts.
		{"openssh-scp", followed, func(t *testing.T, remote string) {
			r := run(t, exec.Command("scp", append(fs.base(), "-r", "-p", tree, "agent@127.0.0.1:"+remote)...), "")
			require.Equal(t, 0, r.code, "scp -r up: %s", r.stderr)
			r = run(t, exec.Command("scp", append(fs.base(), "-r", "-p", "agent@127.0.0.1:"+remote, back)...), "")
			require.Equal(t, 0, r.code, "scp -r down: %s", r.stderr)
		}},
		{"openssh-scp-legacy", followed, func(t *testing.T, remote string) {
			r := run(t, exec.Command("scp", append(fs.base(), "-O", "-r", "-p", tree, "agent@127.0.0.1:"+remote)...), "")
			require.Equal(t, 0, r.code, "scp -O -r up: %s", r.stderr)
			r = run(t, exec.Command("scp", append(fs.base(), "-O", "-r", "-p", "agent@127.0.0.1:"+remote, back)...), "")
			require.Equal(t, 0, r.code, "scp -O -r down: %s", r.stderr)
		}},
		{"asyncssh", followed, func(t *testing.T, remote string) {
			py := python(t, "asyncssh")
			src := filepath.Join(t.TempDir(), "one")
			require.NoError(t, os.WriteFile(src, []byte("one\n"), 0o644))
			r := run(t, exec.Command(py, "-W", "ignore", "../../testdata/ssh/files_asyncssh.py", "127.0.0.1", fs.port, fs.agentKey, src, tree, back), "")
			pythonChecks(t, r, "sftp-tree", "symlink-lstat-readlink")
			require.Equal(t, "tree-asyncssh", remote, "the name the script uses")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote := "tree-" + tc.name
			tc.run(t, remote)
			in := filepath.Join(fs.workdir, remote)
			assert.Equal(t, tc.want, snapshot(t, in, false), "the tree in the sandbox")
			agentOwnsAll(t, in)
			assert.Equal(t, tc.want, snapshot(t, filepath.Join(back, remote), false), "the tree back out")
		})
	}
}

// TestSFTPExtensionsAsOpenSSH drives OpenSSH's sftp through what its
// server offers beyond SFTP v3: symlink, hardlink, posix-rename, statvfs;
// and chmod, and chown refused to a non-root agent, as the kernel says.
func TestSFTPExtensionsAsOpenSSH(t *testing.T) {
	requireTool(t, "sftp", "openssh-client")
	fs := startFilesServer(t)
	one, two := filepath.Join(fs.local, "one"), filepath.Join(fs.local, "two")
	require.NoError(t, os.WriteFile(one, []byte("one\n"), 0o644))
	require.NoError(t, os.WriteFile(two, []byte("two\n"), 0o644))
	r := fs.sftpBatch(t,
		"mkdir ext", "put "+one+" ext/a.txt", "ln -s a.txt ext/sym", "ln ext/a.txt ext/hard",
		"put "+one+" ext/d.txt", "put "+two+" ext/c.txt", "rename ext/c.txt ext/d.txt",
		"chmod 640 ext/a.txt", "-chown 0 ext/a.txt", "mkdir ext/sub", "rmdir ext/sub", "df ext")
	require.Equal(t, 0, r.code, r.stderr)
	ext := filepath.Join(fs.workdir, "ext")

	target, err := os.Readlink(filepath.Join(ext, "sym"))
	require.NoError(t, err, "ln -s made a symlink")
	assert.Equal(t, "a.txt", target, "the link points where asked (OpenSSH's argument order)")
	a, err := os.Stat(filepath.Join(ext, "a.txt"))
	require.NoError(t, err)
	h, err := os.Stat(filepath.Join(ext, "hard"))
	require.NoError(t, err)
	assert.True(t, os.SameFile(a, h), "ln made a hard link (hardlink@openssh.com)")
	b, err := os.ReadFile(filepath.Join(ext, "d.txt"))
	require.NoError(t, err)
	assert.Equal(t, "two\n", string(b), "rename replaced the existing file (posix-rename@openssh.com)")
	assert.NoFileExists(t, filepath.Join(ext, "c.txt"))
	assert.Equal(t, os.FileMode(0o640), a.Mode().Perm(), "chmod")
	assert.Contains(t, r.stderr, "Permission denied", "a non-root agent cannot give a file away")
	agentOwnsAll(t, ext)
	assert.NoDirExists(t, filepath.Join(ext, "sub"))
	assert.Contains(t, r.stdout, "Capacity", "df answered (statvfs@openssh.com)")
}

// TestSFTPAsOpenSSHsServerTellsItsClient: what OpenSSH's client does
// differently with OpenSSH's server it does with sandboxd's: 255 KiB reads
// and writes (limits@openssh.com), and `scp -r` without -p makes each
// directory with the local one's mode (MKDIR's attributes), so a private
// directory stays private.
func TestSFTPAsOpenSSHsServerTellsItsClient(t *testing.T) {
	requireTool(t, "scp", "openssh-client")
	requireTool(t, "sftp", "openssh-client")
	fs := startFilesServer(t)
	r := run(t, exec.Command("sftp", append(fs.base(), "-vvv", "-b", "/dev/null", "agent@127.0.0.1")...), "")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, `Server supports extension "limits@openssh.com"`)
	assert.Contains(t, r.stderr, "using 261120 / 261120", "the client moves 255 KiB per request")

	tree := filepath.Join(fs.local, "modes")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"", 0o755}, {"private", 0o700}, {"group", 0o750}} {
		p := filepath.Join(tree, d.path)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.Chmod(p, d.mode))
	}
	r = run(t, exec.Command("scp", append(fs.base(), "-r", tree, "agent@127.0.0.1:modes")...), "")
	require.Equal(t, 0, r.code, r.stderr)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"private", 0o700}, {"group", 0o750}} {
		st, err := os.Stat(filepath.Join(fs.workdir, "modes", d.path))
		require.NoError(t, err)
		assert.Equal(t, d.mode, st.Mode().Perm(), d.path)
	}
}

// TestLinksOutOfTheViewAreNotFollowed: "escape" points at a file of the
// substrate that the agent user could read there, in a directory absent
// from the sandbox's view (as the harness dir is). The file server
// resolves it inside the view, so nothing of it comes out, and nothing
// goes into the substrate's directory through "escapedir".
func TestLinksOutOfTheViewAreNotFollowed(t *testing.T) {
	requireTool(t, "scp", "openssh-client")
	requireTool(t, "sftp", "openssh-client")
	fs := startFilesServer(t)
	up := filepath.Join(fs.local, "up")
	require.NoError(t, os.WriteFile(up, []byte("planted\n"), 0o644))
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"scp-down", append(fs.base(), "agent@127.0.0.1:escape", filepath.Join(fs.local, "scp-down"))},
		{"scp-legacy-down", append(fs.base(), "-O", "agent@127.0.0.1:escape", filepath.Join(fs.local, "scp-legacy-down"))},
		{"scp-up", append(fs.base(), up, "agent@127.0.0.1:escapedir/scp-up")},
		{"scp-legacy-up", append(fs.base(), "-O", up, "agent@127.0.0.1:escapedir/scp-legacy-up")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, exec.Command("scp", tc.argv...), "")
			if strings.HasSuffix(tc.name, "-down") {
				assert.NotEqual(t, 0, r.code, "scp read through escape")
				assert.Contains(t, r.stderr, "No such file or directory")
				assert.NoFileExists(t, filepath.Join(fs.local, tc.name))
			}
			assert.NoFileExists(t, filepath.Join(fs.hidden, tc.name), "scp wrote into the substrate's directory")
		})
	}
	r := fs.sftpBatch(t, "-get escape "+filepath.Join(fs.local, "sftp-down"), "-put "+up+" escapedir/sftp-up", "-ls escapedir/")
	assert.NoFileExists(t, filepath.Join(fs.local, "sftp-down"))
	assert.NoFileExists(t, filepath.Join(fs.hidden, "sftp-up"))
	assert.NotContains(t, r.stdout, "secret.txt", "sftp listed the substrate's directory")
	b, err := os.ReadFile(filepath.Join(fs.hidden, "secret.txt"))
	require.NoError(t, err)
	assert.Equal(t, "substrate secret\n", string(b), "untouched")
}
