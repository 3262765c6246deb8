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

	for _, tc := range []struct {
		name  string
		moved []string // names in the workdir and in back
		run   func(t *testing.T)
	}{
		{"openssh-scp", []string{"scp.bin"}, func(t *testing.T) {
			r := run(t, exec.Command("scp", append(fs.base(), src, "agent@127.0.0.1:scp.bin")...), "")
			require.Equal(t, 0, r.code, "scp up: %s", r.stderr)
			r = run(t, exec.Command("scp", append(fs.base(), "agent@127.0.0.1:scp.bin", back)...), "")
			require.Equal(t, 0, r.code, "scp down: %s", r.stderr)
		}},
		{"openssh-scp-legacy", []string{"scp-legacy.bin"}, func(t *testing.T) {
			r := run(t, exec.Command("scp", append(fs.base(), "-O", src, "agent@127.0.0.1:scp-legacy.bin")...), "")
			require.Equal(t, 0, r.code, "scp -O up: %s", r.stderr)
			r = run(t, exec.Command("scp", append(fs.base(), "-O", "agent@127.0.0.1:scp-legacy.bin", back)...), "")
			require.Equal(t, 0, r.code, "scp -O down: %s", r.stderr)
		}},
		{"openssh-sftp", []string{"sftp.bin"}, func(t *testing.T) {
			r := fs.sftpBatch(t, "put "+src+" sftp.bin", "get sftp.bin "+back+"/sftp.bin")
			require.Equal(t, 0, r.code, r.stderr)
		}},
		{"paramiko", []string{"paramiko-sftp.bin", "paramiko-scp.bin"}, func(t *testing.T) {
			py := python(t, "paramiko")
			python(t, "scp")
			r := run(t, exec.Command(py, "-W", "ignore", "../../testdata/ssh/files_paramiko.py", "127.0.0.1", fs.port, fs.agentKey, src, back), "")
			pythonChecks(t, r, "sftp-put-get", "scp-put-get", "symlink-lstat-readlink", "escape-not-followed")
		}},
		{"asyncssh", []string{"asyncssh-sftp.bin", "asyncssh-scp.bin"}, func(t *testing.T) {
			py := python(t, "asyncssh")
			tree := filepath.Join(fs.local, "empty-tree")
			require.NoError(t, os.MkdirAll(tree, 0o755))
			r := run(t, exec.Command(py, "-W", "ignore", "../../testdata/ssh/files_asyncssh.py", "127.0.0.1", fs.port, fs.agentKey, src, tree, back), "")
			pythonChecks(t, r, "sftp-put-get", "scp-put-get", "statvfs")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t)
			for _, name := range tc.moved {
				in := filepath.Join(fs.workdir, name)
				assert.Equal(t, want, sha(t, in), "%s in the sandbox", name)
				assert.Equal(t, "1000:1000", owner(t, in), "%s is the agent user's", name)
				assert.Equal(t, want, sha(t, filepath.Join(back, name)), "%s back out", name)
			}
		})
	}
}
