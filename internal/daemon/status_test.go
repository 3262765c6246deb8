package daemon

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/procfs"
)

// status.usage reports what the agent's processes use: from the agent's
// cgroup where serve made one, else summed over the sandbox's processes.
func TestStatusUsage(t *testing.T) {
	requireTool(t, "python3")
	s := serveForTest(t, config.Config{AgentUser: "4321:4321"})
	r := s.sh(t, `nohup python3 -c 'import time; sum(range(3000000)); b = bytearray(96 << 20); b[::4096] = b"x" * len(b[::4096]); open("/tmp/usage-ready-'$$'", "w"); time.sleep(600)' >/dev/null 2>&1 & echo $$`)
	require.NoError(t, r.err)
	marker := "/tmp/usage-ready-" + string(bytes.TrimSpace([]byte(r.stdout)))
	t.Cleanup(func() { os.Remove(marker) })
	require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, 30*time.Second, 20*time.Millisecond)

	u := s.d.Status().Usage
	require.NotNil(t, u)
	if u.Source == "cgroup" {
		require.NotNil(t, s.d.cgroup, "only the agent's cgroup is a source")
	} else {
		assert.Equal(t, "procfs", u.Source, "without a cgroup that counts memory, CPU and pids")
	}
	assert.Empty(t, u.Error)
	assert.GreaterOrEqual(t, u.MemoryBytes, int64(96<<20), "%+v", u)
	assert.GreaterOrEqual(t, u.MemoryPeakBytes, u.MemoryBytes)
	assert.GreaterOrEqual(t, u.Processes, 1)
	assert.Greater(t, u.CPUSeconds, 0.0, "%+v", u)

	// The sum over /proc, which serve falls back to, counts the same
	// process.
	p, err := procfs.UsageInPIDNamespace(s.d.holder.PID)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, p.MemoryBytes, int64(96<<20))
	assert.GreaterOrEqual(t, p.Processes, 2, "the holder and python at least")
}

// `status --ready` is 0 only when a session would be served: here the
// SSH listener answers, and the task's healthcheck gates it.
func TestStatusReady(t *testing.T) {
	dir := flagHealthTask(t, "up")
	s := serveTask(t, dir, config.Config{SSH: config.SSH{Listen: "127.0.0.1:0"}})
	harness := func() (int, string) {
		var out, errb bytes.Buffer
		code := s.d.harnessCommand(context.Background(), "sandboxd status --ready", &out, &errb)
		return code, out.String()
	}
	// The healthcheck runs on its own schedule and may pass between two
	// asks: the control socket's answer counts where the SSH door's before
	// and after it agree (readiness only changes once between the steps
	// below).
	probe := func() (int, string) {
		for {
			code, out := harness()
			var r Readiness
			require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "ready"}, &r))
			if again, _ := harness(); again == code {
				assert.Equal(t, code == 0, r.Ready, "both doors agree")
				return code, out
			}
		}
	}
	code, out := probe()
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "not ready: the task's healthcheck has not passed yet")

	require.Equal(t, 0, s.sh(t, "touch up").exit.Code)
	require.Eventually(t, func() bool { c, _ := probe(); return c == 0 }, 20*time.Second, 50*time.Millisecond)
	code, out = probe()
	assert.Equal(t, 0, code)
	assert.Equal(t, "ready\n", out)

	// SSH that stops answering makes it not ready.
	require.NoError(t, s.d.ssh.listener.Close())
	code, out = probe()
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "SSH does not answer")
}
