package faults

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// Every way serve can fail to start after the sandbox exists ends it within
// 2 s, fail closed: a non-zero exit, the reason on stderr, no process of the
// sandbox left, no control socket, and the lock free for the next serve.
// (serve used to log "sandbox ready", keep the sandbox without SSH or a
// control socket, and wait for a signal.) The egress listeners' failure is
// in internal/daemon: nothing outside serve can make it happen.
func TestStartupFailureAfterTheSandboxEndsServe(t *testing.T) {
	t.Run("SSH listen address taken", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		serveFailsClosed(t, sandboxtest.HarnessDir(t), "listen for SSH on "+ln.Addr().String(), "--listen", ln.Addr().String())
	})
	t.Run("no usable authorized key", func(t *testing.T) {
		keys := filepath.Join(t.TempDir(), "authorized_keys")
		require.NoError(t, os.WriteFile(keys, []byte("ssh-ed25519 not-a-key agent@nowhere\n"), 0o600))
		serveFailsClosed(t, sandboxtest.HarnessDir(t), "none of the agent keys given could be used", "--authorized-keys", keys)
	})
	t.Run("unusable host key", func(t *testing.T) {
		key := filepath.Join(t.TempDir(), "host_key")
		require.NoError(t, os.WriteFile(key, []byte("not a private key\n"), 0o600))
		serveFailsClosed(t, sandboxtest.HarnessDir(t), "parse host key "+key, "--host-key", key)
	})
	t.Run("control socket path too long", func(t *testing.T) {
		// A unix socket's name holds 107 bytes.
		harness := filepath.Join(sandboxtest.HarnessDir(t), strings.Repeat("h", 100))
		serveFailsClosed(t, harness, "listen on control socket")
	})
	t.Run("entrypoint log cannot be opened", func(t *testing.T) {
		harness := sandboxtest.HarnessDir(t)
		task := writeTask(t, harness, taskSpec{sandboxd: `entrypoint = ["/bin/sh", "-c", "exec sleep 1000"]` + "\n"})
		// The log's directory is a file.
		require.NoError(t, os.WriteFile(filepath.Join(harness, "logs"), nil, 0o600))
		serveFailsClosed(t, harness, "entrypoint: create the log dir", "--task", task)
	})
}

// serveFailsClosed runs serve on harness with args, expects it to fail with
// reason once its sandbox is ready, and checks that it leaves nothing.
func serveFailsClosed(t *testing.T, harness, reason string, args ...string) {
	t.Helper()
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	// Whatever serve leaves running when it exits becomes this test's child.
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	workdir := t.TempDir()
	require.NoError(t, os.Chmod(workdir, 0o1777))
	args = append([]string{"serve", "--harness-dir", harness, "--workdir", workdir, "--listen", "127.0.0.1:0", "--host", "--log-format", "text"}, args...)
	cmd := exec.Command(sandboxd(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr := &sandboxtest.Buffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var werr error
	ended := false
	require.Eventually(t, func() bool {
		select {
		case werr = <-exited:
			ended = true
			return true
		default:
			return strings.Contains(stderr.String(), "sandbox ready")
		}
	}, 30*time.Second, 5*time.Millisecond, "serve never built its sandbox: %s", stderr.String())
	ready := time.Now()
	if !ended {
		select {
		case werr = <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatalf("serve kept running without failing: %s", stderr.String())
		}
	}
	took := time.Since(ready)
	t.Logf("serve ended %s after its sandbox was ready: %v", took.Round(time.Millisecond), werr)
	require.Contains(t, stderr.String(), "sandbox ready", "the failure must come after the sandbox exists")
	assert.Less(t, took, 2*time.Second, "serve took %s to fail", took)
	var ee *exec.ExitError
	require.ErrorAs(t, werr, &ee, "serve exits non-zero")
	assert.Equal(t, 125, ee.ExitCode())
	assert.Contains(t, stderr.String(), "sandboxd: serve: ", "the reason is on stderr")
	assert.Contains(t, stderr.String(), reason)

	assert.Empty(t, childrenOf(os.Getpid(), false), "processes serve started survived it")
	reapZombieChildren()
	_, err := os.Stat(control.Socket(harness))
	assert.True(t, os.IsNotExist(err), "a control socket was left")
	lock, err := os.OpenFile(filepath.Join(harness, "run", "serve.lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer lock.Close()
	assert.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB), "the lock is still held")
}

// reapZombieChildren reaps what this process inherited as a subreaper.
func reapZombieChildren() {
	for _, pid := range childrenOf(os.Getpid(), true) {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// childrenOf lists the children of pid: its zombies, or those that still run.
func childrenOf(pid int, zombies bool) []int {
	var out []int
	for _, p := range procfs.PIDs() {
		if st, err := procfs.ReadStat(p); err == nil && st.PPID == pid && (st.State == 'Z') == zombies {
			out = append(out, p)
		}
	}
	return out
}
