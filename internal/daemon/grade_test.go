package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// taskDir writes a task whose test.sh is script and returns its directory.
func taskDir(t *testing.T, toml, script string) string {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tests"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "task.toml"), []byte(toml), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "instruction.md"), []byte("do the thing\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tests", "test.sh"), []byte("#!/bin/bash\n"+script), 0o644))
	return dir
}

// serveTask serves the task at dir in this process.
func serveTask(t *testing.T, dir string, cfg config.Config, allowCIDRs ...string) *served {
	sandboxtest.RequireRoot(t)
	cfg.HarnessDir = sandboxtest.HarnessDir(t)
	cfg.Log = slog.New(slog.DiscardHandler)
	cfg, err := config.Configure(cfg, dir, allowCIDRs, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return serveForTest(t, cfg)
}

func gradeNow(t *testing.T, s *served) grade.Verdict {
	v, err := s.d.Grade(context.Background(), 0)
	require.NoError(t, err)
	return v
}

// The daemon stays root while the agent is not; grading (as the verifier's
// own user) can still make /tests and its verdict
// (docs/failures.md#daemon-stays-root-each-phase-drops).
func TestDaemonStaysRootPhasesDropOnTheirOwn(t *testing.T) {
	work := t.TempDir()
	require.NoError(t, os.Chmod(work, 0o777))
	dir := taskDir(t, fmt.Sprintf("[agent]\nuser = \"4321:4321\"\n[environment]\nworkdir = %q\n", work),
		`stat -c %u made-by-agent > /logs/verifier/owner; id -u > /logs/verifier/verifier; echo 1 > /logs/verifier/reward.txt`)
	s := serveTask(t, dir, config.Config{})
	r := s.sh(t, "id -u; touch made-by-agent")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "4321\n", r.stdout)
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	owner, _ := os.ReadFile("/logs/verifier/owner")
	verifier, _ := os.ReadFile("/logs/verifier/verifier")
	assert.Equal(t, "4321\n", string(owner))
	assert.Equal(t, "0\n", string(verifier), "the verifier runs as the image user (root) by default")
	assert.Equal(t, 0, os.Getuid())
}

// The verifier gets image env + environment.env + verifier.env, never
// agent.env; the agent never gets verifier.env
// (docs/failures.md#verifier-environment-is-its-own).
func TestVerifierEnvIsItsOwn(t *testing.T) {
	dir := taskDir(t, `[environment.env]
SHARED = "env"
[agent.env]
AGENT_ONLY = "agent"
[verifier.env]
VERIFIER_ONLY = "verifier"
`, `env > /logs/verifier/env.txt; echo 1 > /logs/verifier/reward.txt`)
	s := serveTask(t, dir, config.Config{})
	r := s.sh(t, "env")
	assert.Contains(t, r.stdout, "SHARED=env\n")
	assert.Contains(t, r.stdout, "AGENT_ONLY=agent\n")
	assert.NotContains(t, r.stdout, "VERIFIER_ONLY")
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	env, err := os.ReadFile("/logs/verifier/env.txt")
	require.NoError(t, err)
	assert.Contains(t, string(env), "SHARED=env\n")
	assert.Contains(t, string(env), "VERIFIER_ONLY=verifier\n")
	assert.Contains(t, string(env), "PATH=", "a verifier under env -i once had no PATH")
	assert.NotContains(t, string(env), "AGENT_ONLY")
}

// The verifier uses its own allowlist, through the visitor port, while the
// agent had no network at all
// (docs/failures.md#verifier-has-its-own-allowlist).
func TestVerifierInstallsThroughItsOwnAllowlist(t *testing.T) {
	port := upstream(t, "tool-binary")
	dir := taskDir(t, `[agent]
network_mode = "no-network"
[verifier]
network_mode = "allowlist"
allowed_hosts = ["tools.test"]
`, fmt.Sprintf(`out=$(curl -sS --max-time 10 http://tools.test:%d/) && [ "$out" = tool-binary ] && echo 1 > /logs/verifier/reward.txt || { echo "got: $out"; echo 0 > /logs/verifier/reward.txt; }`, port))
	// The tools sit on the substrate's loopback, which only the proxy
	// reaches: the verifier is told of it.
	s := serveTask(t, dir, config.Config{Resolver: fakeResolver{"tools.test": "127.0.0.1"}, Network: config.Network{ProxyEnv: true}}, "127.0.0.0/8")
	r := s.sh(t, fmt.Sprintf("curl -sS --max-time 5 http://tools.test:%d/ 2>&1; env | grep -ci proxy", port))
	assert.NotContains(t, r.stdout, "tool-binary")
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, v.StdoutTail)
}

// The agent's server is alive while the verifier runs and answers it on the
// sandbox's loopback (docs/failures.md#verifier-sees-agent-servers).
func TestAgentServerAnswersVerifier(t *testing.T) {
	dir := taskDir(t, "", `exec 3<>/dev/tcp/127.0.0.1/6665 && echo ping >&3 && read -r line <&3 && [ "$line" = pong ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt`)
	s := serveTask(t, dir, config.Config{})
	r := s.exec(t, execPython(`
import os, socket
if os.fork() == 0:
    os.setsid()
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 6665)); s.listen(5)
    os.close(0); os.close(1); os.close(2)
    while True:
        c, _ = s.accept(); c.recv(100); c.sendall(b"pong\n"); c.close()
print("started")
`), "")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, v.StdoutTail)
	// And again: grading twice in one rollout works, the server still there.
	v = gradeNow(t, s)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)
}

func TestGradeWithoutTaskSaysWhatToDo(t *testing.T) {
	s := serveForTest(t, config.Config{})
	_, err := s.d.Grade(context.Background(), 0)
	require.ErrorIs(t, err, ErrNoTask)
	assert.Contains(t, err.Error(), "--task")
}

// flagHealthTask is a task whose healthcheck passes while the file flag
// exists in its workdir, checked every 0.2 s and unhealthy after two misses.
func flagHealthTask(t *testing.T, flag string) string {
	t.Helper()
	work := t.TempDir()
	require.NoError(t, os.Chmod(work, 0o777))
	return taskDir(t, fmt.Sprintf(`[environment]
workdir = %q
[environment.healthcheck]
command = "test -e %s"
interval_sec = 0.2
start_interval_sec = 0.1
start_period_sec = 0
timeout_sec = 5
retries = 2
`, work, filepath.Join(work, flag)), "echo 1 > /logs/verifier/reward.txt")
}

// The task's healthcheck runs as a visitor (the agent never sees it) with
// Docker's semantics, and status reports it.
func TestHealthcheckReportsStartingHealthyUnhealthy(t *testing.T) {
	dir := flagHealthTask(t, "ready")
	s := serveTask(t, dir, config.Config{})
	require.Eventually(t, func() bool { return s.d.Status().Health == HealthUnhealthy }, 20*time.Second, 50*time.Millisecond)
	passed, state := s.d.HealthPassed()
	assert.False(t, passed, "readiness waits for the first pass")
	assert.Equal(t, HealthUnhealthy, state)
	require.Equal(t, 0, s.sh(t, "touch ready").exit.Code)
	require.Eventually(t, func() bool { return s.d.Status().Health == HealthHealthy }, 20*time.Second, 50*time.Millisecond)
	passed, _ = s.d.HealthPassed()
	assert.True(t, passed)
	require.Equal(t, 0, s.sh(t, "rm ready").exit.Code)
	require.Eventually(t, func() bool { return s.d.Status().Health == HealthUnhealthy }, 20*time.Second, 50*time.Millisecond)
	passed, _ = s.d.HealthPassed()
	assert.True(t, passed, "a pass, once, is Harbor's gate: a later failure is reported in the state")
	r := s.sh(t, "ps -eo args | grep -c '[t]est -e' || true")
	assert.Equal(t, "0\n", r.stdout, "the agent never sees the healthcheck")
}

// The verifier resolves the task's peers by the names the agent uses.
func TestVerifierResolvesPeerNames(t *testing.T) {
	port := upstream(t, "from the peer")
	dir := taskDir(t, "", `getent hosts sidecar > /logs/verifier/hosts; bash -c 'exec 3<>/dev/tcp/sidecar/8099 && printf "GET / HTTP/1.0\\r\\nHost: sidecar\\r\\n\\r\\n" >&3 && timeout 5 cat <&3' | sed '1,/^\r$/d' > /logs/verifier/body; echo 1 > /logs/verifier/reward.txt`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sandboxd.toml"), []byte(fmt.Sprintf("[[peers]]\nname = \"sidecar\"\nport = 8099\ntarget = \"127.0.0.1:%d\"\n", port)), 0o644))
	s := serveTask(t, dir, config.Config{})
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	hosts, _ := os.ReadFile("/logs/verifier/hosts")
	body, _ := os.ReadFile("/logs/verifier/body")
	assert.Contains(t, string(hosts), "127.0.0.1")
	assert.Equal(t, "from the peer", string(body))
	b, _ := os.ReadFile("/etc/hosts")
	assert.NotContains(t, string(b), "sidecar", "the substrate's hosts file is untouched")
}

// On a bare host the host's sockets serve found at start are masked for the
// agent and for the verifier alike, from the one list made then; a socket
// made in /run later (a service the agent started there) is the
// verifier's to use (docs/failures.md#host-mode-masks-the-host).
func TestHostSocketsAreMaskedFromTheListMadeAtStart(t *testing.T) {
	listen := func(path string) {
		ln, err := net.Listen("unix", path)
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close(); os.Remove(path) })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("answered\n"))
				c.Close()
			}
		}()
	}
	host := fmt.Sprintf("/run/sandboxd-test-host-%d.sock", os.Getpid())
	late := fmt.Sprintf("/run/sandboxd-test-late-%d.sock", os.Getpid())
	listen(host)
	ask := `python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.recv(64).decode().strip())' `
	dir := taskDir(t, "", fmt.Sprintf("{ %[1]s %[2]s; %[1]s %[3]s; } > /logs/verifier/seen 2>&1; echo 1 > /logs/verifier/reward.txt\n", ask, host, late))
	s := serveTask(t, dir, config.Config{HostMode: true})
	listen(late)
	r := s.sh(t, ask+host+" || echo refused")
	assert.Contains(t, r.stdout, "refused", "the agent reached a host socket: %s", r.stdout)
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	seen, err := os.ReadFile("/logs/verifier/seen")
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(seen), "answered"), "the verifier's view of the sockets: %s", seen)
	assert.Contains(t, string(seen), "ConnectionRefusedError", "the verifier reached the host socket: %s", seen)
}

// The healthcheck runs under the environment's policy, not the agent's:
// with the agent at no-network and the environment public, the check
// reaches a test host while the agent cannot.
func TestHealthcheckUsesTheEnvironmentsPolicy(t *testing.T) {
	requireTool(t, "curl")
	host := sandboxtest.NewTestHost(t)
	hits := serveBanner(host.Listen(t, 80), "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nup\n")
	dir := taskDir(t, fmt.Sprintf(`[agent]
network_mode = "no-network"
[environment.healthcheck]
command = "curl -sf --max-time 5 http://%s/"
interval_sec = 0.2
start_interval_sec = 0.1
timeout_sec = 8
retries = 2
`, host.Addr), "echo 1 > /logs/verifier/reward.txt")
	s := serveTask(t, dir, config.Config{}, host.Addr.String()+"/32")
	require.Eventually(t, func() bool { return s.d.Status().Health != HealthStarting }, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, HealthHealthy, s.d.Status().Health, s.d.Status().HealthOutput)
	seen := hits.Load()
	assert.NotZero(t, seen, "the check reached the host")
	r := s.sh(t, pyConnect+host.Addr.String()+" 80 | sed -E 's/Connection(Refused|Reset)Error/refused/'")
	assert.Equal(t, "refused\n", r.stdout, "the agent stays at no-network: %s", r.stderr)
}

// Collect hooks are the verifier's: their connections are judged by the
// verifier's policy (public here, while the agent's is no-network), and
// what one prints reaches the harness dir's disk only up to its bound.
func TestCollectHooksAreTheVerifiersAndBounded(t *testing.T) {
	requireTool(t, "curl")
	host := sandboxtest.NewTestHost(t)
	hits := serveBanner(host.Listen(t, 80), "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nup\n")
	dir := taskDir(t, fmt.Sprintf(`[agent]
network_mode = "no-network"
[verifier]
network_mode = "public"
[[verifier.collect]]
command = "curl -sS --max-time 5 http://%s/"
timeout_sec = 10
[[verifier.collect]]
command = "head -c 20971520 /dev/zero"
timeout_sec = 30
`, host.Addr), "echo 1 > /logs/verifier/reward.txt")
	s := serveTask(t, dir, config.Config{}, host.Addr.String()+"/32")
	v := gradeNow(t, s)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message+v.StdoutTail)
	require.NotNil(t, v.Collected)
	require.Len(t, v.Collected.Hooks, 2)
	reach, loud := v.Collected.Hooks[0], v.Collected.Hooks[1]
	assert.Equal(t, 0, reach.ExitCode, "the hook reached the host under the verifier's policy: %s %s", reach.Error, reach.Output)
	assert.NotZero(t, hits.Load())
	assert.Equal(t, 0, loud.ExitCode, loud.Error)
	assert.True(t, loud.OutputTruncated)
	st, err := os.Stat(filepath.Join(v.Collected.Dir, loud.OutputFile))
	require.NoError(t, err)
	assert.EqualValues(t, 16<<20, st.Size(), "the output stops at its bound")
}
