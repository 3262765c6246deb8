package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/control"
)

// cloneParent, formatted with n and living, has the session's own process
// (exec'd, so that it is the daemon's child) clone itself n times with
// CLONE_PARENT, which makes each copy the daemon's child too. The first
// living copies sleep, the others exit at once. Nothing of the daemon waits
// for any of them.
const cloneParent = `exec python3 - <<'EOF'
import ctypes, os, platform, time
nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
for i in range(%d):
    pid = libc.syscall(nr, 0x8000 | 17, 0, 0, 0, 0)  # CLONE_PARENT | SIGCHLD
    if pid == 0:
        if i < %d:
            time.sleep(1000)
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone")
print("cloned")
EOF`

// Issue 11, finding 7: in host mode serve is nobody's PID 1, yet it has
// children it never started: a process of the sandbox that clones itself
// with CLONE_PARENT gives the copy the daemon as parent. serve reaps those
// while it runs, next to the sessions' own processes it waits for, and stop
// does not wait on them (the sandbox's pid 1 cannot finish dying while a
// zombie of its pid namespace is unreaped: stop took 5 to 7 s).
func TestHostModeLeavesNoZombies(t *testing.T) {
	s := startServe(t, "", "")
	daemon := s.cmd.Process.Pid
	const sessions = 8
	for i := 0; i < sessions; i++ {
		out, exit, err := s.exec(fmt.Sprintf(cloneParent, 4, 1), 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, 0, exit.Code, out)
		require.Contains(t, out, "cloned")
	}
	// Sessions of every other kind, ended every way, beside them.
	for _, script := range []string{"true", "exit 3", "kill -9 $$", "sleep 30 & echo started"} {
		_, _, err := s.exec(script, 30*time.Second)
		require.NoError(t, err)
	}
	_, exit, err := s.exec("sleep 30", time.Second)
	t.Logf("a session cut by its client: %+v %v", exit, err)
	c := sshClient(t, s)
	for _, script := range []string{"true", "exit 4", fmt.Sprintf(cloneParent, 2, 1)} {
		sess, err := c.NewSession()
		require.NoError(t, err)
		require.NoError(t, sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
		sess.Run(script)
		sess.Close()
	}

	require.Eventually(t, func() bool { return len(childrenOf(daemon, true)) == 0 }, 10*time.Second, 50*time.Millisecond,
		"zombie children of serve: %v", childrenOf(daemon, true))
	living := childrenOf(daemon, false)

	// Stop while the living copies run: they die with the sandbox, become
	// zombies, and must be reaped for the sandbox's pid 1 to go.
	began := time.Now()
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "stop"}, nil))
	code, ok := s.waitExit(30 * time.Second)
	took := time.Since(began)
	require.True(t, ok, "serve did not stop")
	assert.Equal(t, 0, code, s.stderr.String())
	t.Logf("stop with %d children of serve running (bwrap and the living copies) took %s", len(living), took.Round(time.Millisecond))
}
