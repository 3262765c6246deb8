package sshd_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTerminusStyleTmux drives the sandbox as Terminal-Bench's Terminus
// agent does: a detached tmux session started by one command, keystrokes
// sent by later ones, the screen read back with capture-pane. The tmux
// server started by the first session must outlive it
// (docs/failures.md#background-processes-outlive-their-command), and a 20 KB
// command must arrive whole.
func TestTerminusStyleTmux(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	requireTool(t, "tmux", "tmux")
	ts := startServer(t, options{})
	sh := func(cmd string) result {
		t.Helper()
		return run(t, ts.ssh(t, "agent@127.0.0.1", cmd), "")
	}
	r := sh("tmux new-session -d -s agent -x 160 -y 40 && echo started")
	require.Equal(t, 0, r.code, r.stderr)
	t.Cleanup(func() { sh("tmux kill-server") })

	// tmux carries one command in one message of at most 16 KiB, so a
	// harness types a long command in parts; the whole 20 KB still travels
	// in one SSH exec request.
	keys := fmt.Sprintf("echo RESULT-$(printf %%s %s | wc -c)", strings.Repeat("a", 20000))
	var script strings.Builder
	for len(keys) > 0 {
		n := min(len(keys), 4000)
		fmt.Fprintf(&script, "tmux send-keys -t agent -l '%s' && ", keys[:n])
		keys = keys[n:]
	}
	script.WriteString("tmux send-keys -t agent Enter")
	require.Greater(t, script.Len(), 20000)
	r = sh(script.String())
	require.Equal(t, 0, r.code, r.stderr)

	var screen string
	require.Eventually(t, func() bool {
		r := sh("tmux capture-pane -p -t agent")
		screen = r.stdout
		return strings.Contains(screen, "RESULT-20000")
	}, 30*time.Second, 200*time.Millisecond, "screen: %s", screen)
}
