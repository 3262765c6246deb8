package daemon

import (
	"archive/tar"
	"bytes"
	"context"
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
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

func (s *served) cp(t *testing.T, c tarcopy.Copy) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	return tarcopy.Run(ctx, s.client, c)
}

// A tree goes into the sandbox and back out unchanged — modes, exec bits,
// symlinks, empty directories, times — and what goes in is the agent's.
func TestCpRoundTripThroughTheSandbox(t *testing.T) {
	s := serveForTest(t, config.Config{AgentUser: "4321:4321"})
	src := filepath.Join(t.TempDir(), "app")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "empty/nested"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "data"), []byte("data"), 0o640))
	require.NoError(t, os.Symlink("run.sh", filepath.Join(src, "link")))
	inside := sharedTmp(t, 0o777)

	require.NoError(t, s.cp(t, tarcopy.Copy{Src: src, Dst: "sandbox:" + inside}))
	r := s.sh(t, inside+"/app/run.sh; stat -c '%u:%g %a' "+inside+"/app/data; readlink "+inside+"/app/link")
	require.NoError(t, r.err)
	assert.Equal(t, "ran\n4321:4321 640\nrun.sh\n", r.stdout, r.stderr)

	out := t.TempDir()
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: "sandbox:" + inside + "/app/.", Dst: filepath.Join(out, "back")}))
	assert.Equal(t, sandboxtest.Tree(t, src, false), sandboxtest.Tree(t, filepath.Join(out, "back"), false))
	st, err := os.Lstat(filepath.Join(out, "back/data"))
	require.NoError(t, err)
	assert.Equal(t, uint32(os.Getuid()), st.Sys().(*syscall.Stat_t).Uid, "copied out: the caller's")

	// -a keeps the archive's ids both ways.
	out2 := t.TempDir()
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: "sandbox:" + inside + "/app", Dst: out2, Archive: true}))
	st, err = os.Lstat(filepath.Join(out2, "app/data"))
	require.NoError(t, err)
	assert.Equal(t, uint32(4321), st.Sys().(*syscall.Stat_t).Uid)
	require.NoError(t, os.Lchown(filepath.Join(src, "data"), 1234, 5678))
	rootOnly := inside + "/root-only"
	require.NoError(t, os.Mkdir(rootOnly, 0o755))
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: src, Dst: "sandbox:" + rootOnly, Archive: true}))
	asRoot := func(script string) execResult {
		return s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", script}, User: "0"}, "")
	}
	r = asRoot("stat -c '%u:%g' " + rootOnly + "/app/data")
	assert.Equal(t, "1234:5678\n", r.stdout, "into a directory only root may write, with the archive's ids: %s", r.stderr)
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: src + "/data", Dst: "sandbox:" + rootOnly, User: "0:0"}))
	r = asRoot("stat -c '%u:%g' " + rootOnly + "/data")
	assert.Equal(t, "0:0\n", r.stdout, "-u names the owner")
}

// sandbox:PATH resolves in the sandbox's view, where the harness dir is
// absent: neither its path nor a symlink the agent points at it reaches it.
func TestCpSandboxSideIsTheSandboxsView(t *testing.T) {
	s := serveForTest(t, config.Config{})
	require.NoError(t, os.WriteFile(filepath.Join(s.harness, "secret"), []byte("harness"), 0o600))
	link := sharedTmp(t, 0o755) + "/to-harness"
	r := s.sh(t, "ln -s "+s.harness+" "+link)
	require.NoError(t, r.err)
	for _, src := range []string{s.harness + "/secret", link + "/secret", link + "/."} {
		out := t.TempDir()
		err := s.cp(t, tarcopy.Copy{Src: "sandbox:" + src, Dst: filepath.Join(out, "x")})
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), "no such file or directory", src)
		assert.NoFileExists(t, filepath.Join(out, "x"))
	}
	// Copying in through the same link lands in the sandbox's view, never
	// in the harness dir.
	err := s.cp(t, tarcopy.Copy{Src: "-", Dst: "sandbox:" + link, Stdin: tarOf(t, "planted", "x")})
	require.Error(t, err)
	assert.NoFileExists(t, filepath.Join(s.harness, "planted"))
}

// A local DST the agent has pointed elsewhere with a symlink (the shared
// filesystem is the agent's too) is refused, not followed.
func TestCpOutFollowsNoPlantedSymlink(t *testing.T) {
	s := serveForTest(t, config.Config{})
	base := sharedTmp(t, 0o755)
	r := s.sh(t, "mkdir -p "+base+"/src && echo x > "+base+"/src/f && ln -s "+s.harness+" "+base+"/out")
	require.NoError(t, r.err, r.stderr)
	err := s.cp(t, tarcopy.Copy{Src: "sandbox:" + base + "/src", Dst: base + "/out"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "symlink")
	assert.NoDirExists(t, filepath.Join(s.harness, "src"))
}

// `-` is a tar stream: out to stdout, in from stdin.
func TestCpTarStreams(t *testing.T) {
	s := serveForTest(t, config.Config{})
	inside := sharedTmp(t, 0o755)
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: "-", Dst: "sandbox:" + inside, Stdin: tarOf(t, "dir/file", "streamed")}))
	var out bytes.Buffer
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: "sandbox:" + inside + "/dir", Dst: "-", Stdout: &out}))
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		if h.Name == "dir/file" {
			b, _ := io.ReadAll(tr)
			assert.Equal(t, "streamed", string(b))
		}
	}
	assert.Equal(t, []string{"dir/", "dir/file"}, names)
}

// cpBigFile is TestCpLargeFile's size: 64 MiB, or 1 GiB under -tags soak.
var cpBigFile int64 = 64 << 20

// A large file streams through the control socket with its checksum kept.
func TestCpLargeFile(t *testing.T) {
	s := serveForTest(t, config.Config{})
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big"))
	require.NoError(t, err)
	_, err = io.CopyN(f, rand.NewChaCha8([32]byte{2}), cpBigFile)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	inside := sharedTmp(t, 0o755)
	start := time.Now()
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: filepath.Join(dir, "big"), Dst: "sandbox:" + inside}))
	in := time.Since(start)
	out := t.TempDir()
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: "sandbox:" + inside + "/big", Dst: out}))
	t.Logf("%d MiB: in %v, out %v", cpBigFile>>20, in.Round(time.Millisecond), (time.Since(start) - in).Round(time.Millisecond))
	assert.Equal(t, sandboxtest.Tree(t, dir, false)["big"], sandboxtest.Tree(t, out, false)["big"], "checksum, mode and mtime")
}

func tarOf(t *testing.T, name, body string) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte(body))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	return &b
}

// A local SRC the agent has pointed at the harness dir with a symlink is
// refused: nothing of the harness's is copied into the sandbox.
func TestCpInReadsNoPlantedSymlink(t *testing.T) {
	s := serveForTest(t, config.Config{})
	require.NoError(t, os.WriteFile(filepath.Join(s.harness, "secret"), []byte("harness"), 0o600))
	base := sharedTmp(t, 0o755)
	r := s.sh(t, "mkdir -p "+base+"/in && ln -s "+s.harness+" "+base+"/input")
	require.NoError(t, r.err, r.stderr)
	for _, src := range []string{base + "/input/.", base + "/input/secret"} {
		err := s.cp(t, tarcopy.Copy{Src: src, Dst: "sandbox:" + base + "/in"})
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), "symlink", src)
	}
	r = s.sh(t, "ls -A "+base+"/in")
	assert.Empty(t, r.stdout, "nothing was copied in")
}

// sharedTmp is a fresh directory in /tmp, which the sandbox shares (a
// test's own temporary directory lies below one only root may enter).
func sharedTmp(t *testing.T, mode os.FileMode) string {
	dir, err := os.MkdirTemp("/tmp", "sandboxd-cp-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, mode))
	return dir
}

// Harbor's known file-transfer failures, by name, through the sandbox and
// back: a tree of 10,000 files with exec bits, symlinks and empty
// directories arrives whole, checksums, modes and times equal.
func TestCpHarborFailuresThroughTheSandbox(t *testing.T) {
	s := serveForTest(t, config.Config{AgentUser: "4321:4321"})
	src := filepath.Join(t.TempDir(), "tree")
	for i := range 10000 {
		p := filepath.Join(src, fmt.Sprintf("d%02d/f%05d", i%100, i))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))
	require.NoError(t, os.Symlink("run.sh", filepath.Join(src, "link")))
	require.NoError(t, os.Symlink("/nowhere", filepath.Join(src, "dangling")))
	require.NoError(t, os.MkdirAll(filepath.Join(src, "empty/nested"), 0o700))

	inside := sharedTmp(t, 0o777)
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: src, Dst: "sandbox:" + inside}))
	r := s.sh(t, inside+"/tree/link && find "+inside+"/tree -type f | wc -l")
	assert.Equal(t, "ran\n10001\n", r.stdout, "the agent runs what it was given: %s", r.stderr)
	out := t.TempDir()
	require.NoError(t, s.cp(t, tarcopy.Copy{Src: "sandbox:" + inside + "/tree", Dst: out}))
	want, got := sandboxtest.Tree(t, src, false), sandboxtest.Tree(t, filepath.Join(out, "tree"), false)
	for _, c := range []struct{ failure, name string }{
		{"dropped files", "d99/f09999"},
		{"lost exec bits", "run.sh"},
		{"symlinks", "link"},
		{"symlinks", "dangling"},
		{"empty directories", "empty"},
		{"empty directories", "empty/nested"},
	} {
		assert.Equal(t, want[c.name], got[c.name], "%s: %s", c.failure, c.name)
	}
	assert.Len(t, got, len(want))
	assert.Equal(t, want, got)
}

// The copy's role runs as the sandbox's root without the agent's limits,
// in the sandbox's pid namespace: a root agent must not be able to read or
// trace it (and so run in it outside its cgroup). Its permitted set holds a
// capability a root session's lacks, from its exec on, and it is
// undumpable once running: either closes its /proc files to a root without
// CAP_SYS_PTRACE. The first is checked from outside, since the moment
// between the role's exec and its PR_SET_DUMPABLE is too short to catch on
// purpose from inside.
func TestCpRoleIsClosedToARootAgent(t *testing.T) {
	s := serveForTest(t, config.Config{AgentUser: "0:0"})
	inside := sharedTmp(t, 0o777)
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() { copied <- s.cp(t, tarcopy.Copy{Src: "-", Dst: "sandbox:" + inside, Stdin: pr}) }()
	// The role waits on the archive that is not coming yet.
	var pid string
	require.Eventually(t, func() bool {
		r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", `for p in /proc/[0-9]*; do if [ ${p#/proc/} != $$ ] && tr '\0' ' ' <$p/cmdline 2>/dev/null | grep -q ' unpack ` + inside + ` '; then echo ${p#/proc/}; fi; done`}, User: "0"}, "")
		pid = strings.TrimSpace(r.stdout)
		return pid != ""
	}, 20*time.Second, 100*time.Millisecond, "the cp role is not seen in the sandbox")
	// Listing /proc/PID/fd is a plain permission check on the directory;
	// where a descriptor leads, and the environment, are the ptrace check's.
	for what, cmd := range map[string]string{"descriptors": "readlink -v /proc/" + pid + "/fd/0", "environment": "cat /proc/" + pid + "/environ"} {
		r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", cmd}, User: "0"}, "")
		assert.NotEqual(t, 0, r.exit.Code, "a root agent read the cp role's %s: %s", what, r.stdout)
		assert.Contains(t, r.stderr, "ermission denied", what)
	}

	r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", "awk '/^CapPrm:/ {print $2}' /proc/self/status"}, User: "0"}, "")
	require.NoError(t, r.err, r.stderr)
	agent := capSet(t, r.stdout)
	role := capSet(t, procStatusLine(t, hostPIDOf(t, "unpack\x00"+inside+"\x00"), "CapPrm"))
	assert.NotZero(t, role&^agent, "the cp role's permitted set %016x lies within a root agent's %016x, so a root agent may trace it as it starts", role, agent)
	// And no more than that: the one capability beyond, inert in a user
	// namespace of its own.
	assert.Equal(t, agent|1<<unix.CAP_SYS_MODULE, role, "the cp role's permitted set is a root session's and CAP_SYS_MODULE")
	pw.Close()
	require.NoError(t, <-copied)
}

// hostPIDOf is the process, as this test sees it, whose command line (its
// arguments NUL-separated) holds want.
func hostPIDOf(t *testing.T, want string) int {
	t.Helper()
	for _, pid := range procfs.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), want) {
			return pid
		}
	}
	t.Fatalf("no process with %q in its command line", want)
	return 0
}

// procStatusLine is the value of one field of /proc/PID/status.
func procStatusLine(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// capSet parses a capability mask as /proc/PID/status prints it.
func capSet(t *testing.T, s string) uint64 {
	t.Helper()
	var mask uint64
	_, err := fmt.Sscanf(strings.TrimSpace(s), "%x", &mask)
	require.NoError(t, err, "capability mask %q", s)
	return mask
}
