package sshd_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// runPython runs one of the client scripts in testdata/ssh with Debian's
// python3 (its paramiko and asyncssh come from apt, not from a virtualenv).
func runPython(t *testing.T, module, script string, checks ...string) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		requireTool(t, python, "python3")
	}
	if err := exec.Command(python, "-c", "import "+module).Run(); err != nil {
		requireTool(t, "python3-"+module+"-missing", "python3-"+module)
	}
	ts := startServer(t, options{})
	cmd := exec.Command(python, "-W", "ignore", "../../testdata/ssh/"+script, "127.0.0.1", ts.port, ts.agentKey)
	r := run(t, cmd, "")
	assert.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, c := range checks {
		assert.Contains(t, strings.Split(r.stdout, "\n"), "ok "+c)
	}
}

func TestParamiko(t *testing.T) {
	runPython(t, "paramiko", "paramiko_client.py",
		"exec-exit-status", "exit-signal", "stdin-heredoc", "pty", "resize-during-output", "invoke-shell")
}

func TestAsyncSSH(t *testing.T) {
	runPython(t, "asyncssh", "asyncssh_client.py",
		"exec-exit-status", "exit-signal", "stdin-heredoc", "pty", "resize-during-output", "shell")
}
