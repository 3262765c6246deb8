package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// writeTask writes a minimal task whose task.toml is toml and, when
// sandboxd is not "", its sandboxd.toml.
func writeTask(t *testing.T, toml, sandboxd string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "task")
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tests"), 0o755))
	files := map[string]string{"task.toml": toml, "instruction.md": "Do the thing.\n", "tests/test.sh": "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"}
	if sandboxd != "" {
		files["sandboxd.toml"] = sandboxd
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	return dir
}

// A network flag or variable that says other than the served task is
// refused before anything is built, naming both sides; one that restates
// the task is not in the way.
func TestServeRefusesNetworkSettingsThatContradictTheTask(t *testing.T) {
	dir := writeTask(t, "[environment]\nnetwork_mode = \"no-network\"\n", "")
	harness := filepath.Join(t.TempDir(), "harness")
	r := run(t, nil, "serve", "--harness-dir", harness, "--task", dir, "--listen", "", "--network", "public")
	assert.Equal(t, exitOwn, r.code)
	assert.Contains(t, r.stderr, `task "task" says the agent's network is no-network (task.toml), and --network says public`)

	r = run(t, []string{"SANDBOXD_NETWORK=public", "SANDBOXD_TASK=" + dir, "SANDBOXD_HARNESS_DIR=" + harness}, "serve")
	assert.Equal(t, exitOwn, r.code)
	assert.Contains(t, r.stderr, "and SANDBOXD_NETWORK says public")
	assert.Contains(t, r.stderr, "drop SANDBOXD_NETWORK")

	r = run(t, []string{"SANDBOXD_PEER=db:5432", "SANDBOXD_TASK=" + dir, "SANDBOXD_HARNESS_DIR=" + harness}, "serve")
	assert.Equal(t, exitOwn, r.code)
	assert.Contains(t, r.stderr, "its peers are none (sandboxd.toml), and SANDBOXD_PEER says [db:5432=127.0.0.1:5432]")
}

// serving is a `sandboxd serve` started from the built binary.
type serving struct {
	t       *testing.T
	harness string
	cmd     *exec.Cmd
	log     *bytes.Buffer
}

func startServe(t *testing.T, env []string, args ...string) *serving {
	t.Helper()
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	s := &serving{t: t, harness: sandboxtest.HarnessDir(t), log: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	s.cmd.Env = cleanEnv(append(env, "SANDBOXD_HARNESS_DIR="+s.harness)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	require.NoError(t, s.cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
			return
		default:
		}
		s.client(nil, "stop")
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("serve ended before it served (%v): %s", waitErr, s.log)
		default:
		}
		if s.client(nil, "status").code == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer within 30s: %s", s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client runs a client command of the built binary against this serve.
func (s *serving) client(stdin []byte, args ...string) result {
	return runBin(s.t, bin, []string{"SANDBOXD_HARNESS_DIR=" + s.harness}, stdin, args...)
}

type statusDoc struct {
	Settings map[string]struct {
		Value  any    `json:"value"`
		Source string `json:"source"`
	} `json:"settings"`
	Network struct {
		Agent string   `json:"agent"`
		Peers []string `json:"peers"`
	} `json:"network"`
	SSH     *struct{ Listen string } `json:"ssh"`
	Workdir string                   `json:"workdir"`
	Sandbox struct {
		PID int `json:"pid"`
	} `json:"sandbox"`
}

func (s *serving) status() statusDoc {
	r := s.client(nil, "status")
	require.Equal(s.t, 0, r.code, r.stderr)
	var st statusDoc
	require.NoError(s.t, jsonUnmarshal(r.stdout, &st))
	return st
}

func agentKey(t *testing.T) string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	k, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// Every serve flag can be a SANDBOXD_ variable: a flag wins over it, a
// repeatable one is a comma-separated list, one set empty is given
// (SANDBOXD_LISTEN= turns SSH off), and status says where each value came
// from. None of the variables reaches a session or the sandbox's pid 1.
func TestServeTakesSettingsFromVariables(t *testing.T) {
	work := t.TempDir()
	require.NoError(t, os.Chmod(work, 0o755))
	env := []string{
		"SANDBOXD_LISTEN=",
		"SANDBOXD_ALLOW_HOST=pypi.org, *.pythonhosted.org",
		"SANDBOXD_PEER=db:5432,cache:6379=127.0.0.1:16379",
		"SANDBOXD_ACCEPT_ENV=FOO_*",
		"SANDBOXD_ALLOW_DEGRADED=0",
		"SANDBOXD_SESSION_TIMEOUT=1h",
		"SANDBOXD_WORKDIR=/nonexistent-loses-to-the-flag",
		"SANDBOXD_AUTHORIZED_KEYS=" + agentKey(t) + " secret-agent-key",
		"SANDBOXD_NOT_A_SETTING=secret-unknown",
	}
	s := startServe(t, env, "--log-format", "text", "--workdir", work)
	st := s.status()
	for name, want := range map[string]struct {
		value  any
		source string
	}{
		"listen":            {"", "env"},
		"network":           {"allowlist", "env"},
		"allow-host":        {[]any{"pypi.org", "*.pythonhosted.org"}, "env"},
		"peer":              {[]any{"db:5432=127.0.0.1:5432", "cache:6379=127.0.0.1:16379"}, "env"},
		"accept-env":        {[]any{"FOO_*"}, "env"},
		"allow-degraded":    {false, "env"},
		"session-timeout":   {"1h0m0s", "env"},
		"workdir":           {work, "flag"},
		"log-format":        {"text", "flag"},
		"harness-dir":       {s.harness, "env"},
		"authorized-keys":   {"1 keys by value", "env"},
		"bwrap":             {"bwrap", "default"},
		"agent-max-procs":   {float64(4096), "default"},
		"egress-allow-cidr": {[]any{}, "default"},
	} {
		got, ok := st.Settings[name]
		if assert.True(t, ok, "status has no setting %s", name) {
			assert.Equal(t, want.value, got.Value, name)
			assert.Equal(t, want.source, got.Source, name)
		}
	}
	assert.Nil(t, st.SSH, "SANDBOXD_LISTEN= turns SSH off")
	assert.Equal(t, "allowlist", st.Network.Agent)
	assert.Equal(t, []string{"db=127.0.0.1:5432->127.0.0.1:5432", "cache=127.0.0.1:6379->127.0.0.1:16379"}, st.Network.Peers)
	assert.Equal(t, work, st.Workdir)
	assert.Contains(t, s.log.String(), "SANDBOXD_NOT_A_SETTING is set, but serve has no such setting")
	assert.Contains(t, s.log.String(), "--workdir is given, so SANDBOXD_WORKDIR is not used")

	// exec -it as docker users type it: a terminal, and stdin forwarded.
	r := s.client([]byte("echo from-stdin; exit 7\n"), "exec", "-it", "--", "sh", "-c", "test -t 0 && echo tty; env; exec sh")
	assert.Equal(t, 7, r.code, r.stderr)
	assert.Contains(t, r.stdout, "tty")
	assert.Contains(t, r.stdout, "from-stdin")
	r = s.client(nil, "exec", "-ti", "--", "sh", "-c", "tr '\\0' '\\n' < /proc/self/environ")
	require.Equal(t, 0, r.code, r.stderr)
	for _, out := range []string{r.stdout, readEnviron(t, st.Sandbox.PID)} {
		assert.NotContains(t, out, "SANDBOXD_")
		assert.NotContains(t, out, "secret-")
	}
}

func readEnviron(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), "\x00", "\n")
}

// With a task, a variable wins over its sandboxd.toml (even empty), a
// network variable that restates the task is accepted, and what neither
// gives comes from the task's files.
func TestServeVariablesWinOverSandboxdTOML(t *testing.T) {
	work := t.TempDir()
	require.NoError(t, os.Chmod(work, 0o755))
	dir := writeTask(t, fmt.Sprintf("[environment]\nworkdir = %q\n[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n", work),
		"listen = \"127.0.0.1:2299\"\negress_allow_cidrs = [\"10.9.0.0/16\"]\n")
	s := startServe(t, []string{"SANDBOXD_TASK=" + dir, "SANDBOXD_LISTEN=", "SANDBOXD_NETWORK=allowlist", "SANDBOXD_EGRESS_ALLOW_CIDR=10.8.0.0/16"})
	st := s.status()
	assert.Nil(t, st.SSH, "SANDBOXD_LISTEN= wins over listen in sandboxd.toml")
	for name, want := range map[string]struct {
		value  any
		source string
	}{
		"listen":            {"", "env"},
		"network":           {"allowlist", "env"},
		"allow-host":        {[]any{"pypi.org"}, "task.toml"},
		"egress-allow-cidr": {[]any{"10.8.0.0/16"}, "env"},
		"workdir":           {work, "task.toml"},
		"task":              {dir, "env"},
		"peer":              {[]any{}, "default"},
	} {
		assert.Equal(t, want.value, st.Settings[name].Value, name)
		assert.Equal(t, want.source, st.Settings[name].Source, name)
	}
}
