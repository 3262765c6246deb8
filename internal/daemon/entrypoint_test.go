package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
)

// serveEntrypoint serves a task whose image entrypoint is argv, a TOML array.
func serveEntrypoint(t *testing.T, argv string) (*served, string) {
	t.Helper()
	dir := taskDir(t, "", "echo 1 > /logs/verifier/reward.txt")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sandboxd.toml"), []byte("entrypoint = "+argv+"\n"), 0o644))
	s := serveTask(t, dir, config.Config{})
	return s, filepath.Join(s.harness, "logs", "entrypoint.log")
}

func readLog(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// Issue 11, finding 5: the entrypoint's stdout and stderr are a pipe that the
// daemon drains into the harness's log, not the log itself. Through
// /proc/PID/fd a root agent learns no harness path, cannot read the log, and
// cannot truncate or overwrite it: what it writes there joins the
// entrypoint's output stream, which only the daemon appends to the log.
func TestEntrypointStdoutIsAPipeNotTheHarnessLog(t *testing.T) {
	s, logPath := serveEntrypoint(t, `["/bin/sh", "-c", "echo said-by-the-entrypoint; exec sleep 4711"]`)
	require.Eventually(t, func() bool { return strings.Contains(readLog(logPath), "said-by-the-entrypoint") }, 10*time.Second, 20*time.Millisecond)

	r := s.sh(t, `p=$(pgrep -x -f 'sleep 4711')
readlink /proc/$p/fd/1 /proc/$p/fd/2
timeout 1 cat /proc/$p/fd/1
echo written-by-the-agent > /proc/$p/fd/1; true`)
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.NotContains(t, r.stdout, s.harness, "readlink names the harness dir")
	assert.Regexp(t, `^pipe:\[\d+\]\npipe:\[\d+\]\n`, r.stdout)
	assert.NotContains(t, r.stdout, "said-by-the-entrypoint", "the agent read the harness's log through the entrypoint's stdout")

	// The agent's truncating write did not reach the file: the log still
	// begins with what the entrypoint said.
	time.Sleep(200 * time.Millisecond)
	assert.True(t, strings.HasPrefix(readLog(logPath), "said-by-the-entrypoint\n"), "the log was rewritten: %q", readLog(logPath))
}

// The daemon drains the entrypoint's pipe to EOF: a burst larger than the
// pipe neither blocks the entrypoint nor loses a byte, and what a child it
// left behind writes after it exited reaches the log too.
func TestEntrypointLogKeepsEveryByteUntilEOF(t *testing.T) {
	const burst = 3 << 20
	s, logPath := serveEntrypoint(t, `["/bin/sh", "-c", "yes 0123456789abcde | head -c 3145728; echo burst-done >&2; (sleep 0.5; echo left-behind) & exit 0"]`)
	require.Eventually(t, func() bool { return s.d.Status().Entrypoint == "exited 0" }, 20*time.Second, 20*time.Millisecond,
		"the entrypoint finished its burst and exited: %s", s.d.Status().Entrypoint)
	require.Eventually(t, func() bool { return strings.HasSuffix(readLog(logPath), "left-behind\n") }, 10*time.Second, 20*time.Millisecond)
	log := readLog(logPath)
	assert.Equal(t, burst+len("burst-done\n")+len("left-behind\n"), len(log))
	assert.Equal(t, strings.Repeat("0123456789abcde\n", burst/16), log[:burst])
	assert.Equal(t, "burst-done\nleft-behind\n", log[burst:])
}
