// Package sandboxtest starts real sandboxes for tests: real bwrap, real
// namespaces, as root. A privileged test never skips silently in CI: with
// CI set (or SANDBOXD_REQUIRE_PRIVILEGED=1) a missing privilege fails it.
package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// Strict reports whether privileged tests must run rather than skip: under
// make (SANDBOXD_REQUIRE_PRIVILEGED=1) and in CI.
func Strict() bool { return os.Getenv("CI") != "" || underMake() }

func underMake() bool { return os.Getenv("SANDBOXD_REQUIRE_PRIVILEGED") == "1" }

// Need ends a test that lacks what it needs, named by what: a failure where
// privileged tests must run (Strict), a skip that names it elsewhere.
func Need(t testing.TB, what string) {
	t.Helper()
	need(t, Strict(), what)
}

// NeedUnderMake is Need for a test that CI does not run (the e2e, whose
// images need debootstrap and a Docker engine): a failure under make only.
func NeedUnderMake(t testing.TB, what string) {
	t.Helper()
	need(t, underMake(), what)
}

func need(t testing.TB, strict bool, what string) {
	t.Helper()
	if strict {
		t.Fatalf("needs %s, and this run must not skip it", what)
	}
	t.Skipf("needs %s (SANDBOXD_REQUIRE_PRIVILEGED=1 makes this a failure)", what)
}

// RequireRoot ends a test that needs root and bwrap without them (see Need).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "root (run the tests as root: sudo make test)")
	} else if _, err := exec.LookPath("bwrap"); err != nil {
		Need(t, "bwrap (apt-get install bubblewrap)")
	}
}

// ProcsOf lists this machine's processes whose command line (arguments
// joined by spaces) starts with prefix: what a test looks for when it checks
// that a session left nothing behind.
func ProcsOf(prefix string) []int {
	var out []int
	for _, pid := range procfs.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.HasPrefix(strings.ReplaceAll(string(b), "\x00", " "), prefix) {
			out = append(out, pid)
		}
	}
	return out
}

// Sandbox is a started holder and the target to join it.
type Sandbox struct {
	Holder *bwrap.Holder
	Target join.Target
}

// Start builds a sandbox from cfg (Workdir defaults to a fresh directory) and
// kills it when the test ends.
func Start(t testing.TB, cfg bwrap.Config) *Sandbox {
	t.Helper()
	RequireRoot(t)
	if cfg.Workdir == "" {
		cfg.Workdir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := bwrap.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(h.Kill)
	return &Sandbox{Holder: h, Target: join.Target{PID: h.PID, Namespaces: h.Namespaces}}
}

// Result is what a command did.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs argv in the sandbox as user (a Docker-style spec) with env and
// waits for it.
func (s *Sandbox) Run(t testing.TB, user string, env []string, argv ...string) Result {
	t.Helper()
	u, err := idmap.Lookup("/", user)
	require.NoError(t, err)
	if env == nil {
		env = []string{"PATH=" + childproc.DefaultPath, "HOME=" + u.Home}
	}
	st, err := s.Target.Command(join.Spec{User: u, Env: env, Dir: "", Argv: argv})
	require.NoError(t, err)
	var out, errb bytes.Buffer
	st.Cmd.Stdout, st.Cmd.Stderr = &out, &errb
	p, err := st.Start()
	if err != nil {
		st.Cmd.Wait()
		if se, ok := err.(*join.SetupError); ok {
			return Result{Stderr: se.Msg, Code: se.Code}
		}
		require.NoError(t, err)
	}
	_ = p
	werr := st.Cmd.Wait()
	code, _, ok := join.ExitStatus(werr)
	require.True(t, ok, "wait: %v", werr)
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// Sh runs a shell script in the sandbox as user.
func (s *Sandbox) Sh(t testing.TB, user, script string) Result {
	t.Helper()
	return s.Run(t, user, nil, "/bin/sh", "-c", script)
}

// HarnessDir makes a marked harness directory under /media for a test.
func HarnessDir(t testing.TB) string {
	t.Helper()
	require.NoError(t, os.MkdirAll("/media", 0o755))
	dir, err := os.MkdirTemp("/media", "sandboxd-test-")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, masks.HarnessMarker), nil, 0o600))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SharedTests serializes, across test binaries, the tests that create or
// assert the absence of /tests in the shared filesystem: grading makes an
// empty /tests mount point there while a verifier runs, and `go test ./...`
// runs packages in parallel. Within one test binary it is re-entrant (a test
// that restarts serve takes it twice); the file lock is held while any test
// of the binary holds it.
func SharedTests(t testing.TB) {
	t.Helper()
	sharedMu.Lock()
	if sharedHolders == 0 {
		f, err := os.OpenFile("/run/sandboxd-tests-slash-tests.lock", os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			sharedMu.Unlock()
			require.NoError(t, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			sharedMu.Unlock()
			require.NoError(t, err)
		}
		sharedLock = f
	}
	sharedHolders++
	sharedMu.Unlock()
	t.Cleanup(func() {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		sharedHolders--
		if sharedHolders == 0 {
			sharedLock.Close()
			sharedLock = nil
		}
	})
}

var (
	sharedMu      sync.Mutex
	sharedHolders int
	sharedLock    *os.File
)

// Buffer is a writer that a test reads while a session still writes to it.
// The zero value keeps everything; with Max set it keeps the first Max bytes
// (give or take one write) and takes the rest without keeping it, so that a
// flood cannot fill the test's memory.
type Buffer struct {
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max > 0 && b.b.Len() > b.Max {
		return len(p), nil
	}
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor polls until the buffer holds want, and fails the test after ten
// seconds without it.
func (b *Buffer) WaitFor(t testing.TB, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(b.String(), want) }, 10*time.Second, 5*time.Millisecond,
		"waiting for %q; have %q", want, b.String())
}

// DialSSH logs in to a daemon's SSH door at addr as the agent with signer,
// and closes the connection when the test ends.
func DialSSH(t testing.TB, addr string, signer ssh.Signer) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:            "agent",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a door on loopback that the test started
		Timeout:         10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// RSSMiB is this process's resident set in MiB (-1 when /proc does not say):
// a daemon that runs in the test's process is measured with it.
func RSSMiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}
