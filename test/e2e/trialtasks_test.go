//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// sandboxdBin is the adapted image's sandboxd.
const sandboxdBin = "/media/sandboxd/bin/sandboxd"

// TestAdaptedTrialTasks runs the tasks of testdata/tasks/trial (Harbor's
// trial semantics, which `trial` covers in host mode) in adapted containers,
// driven as a harness drives `serve` itself: the agent over SSH, its outcome
// marked with `agent-done`, then `grade`. Each task's environment differs
// (its WORKDIR), so each is a group of its own; they are built over the base
// that has bubblewrap, without Harbor's tools (TestHarborTools' subject), so
// that adapt installs nothing.
func TestAdaptedTrialTasks(t *testing.T) {
	e := setup(t)
	dirs := e.dataset(t, "e2e-trial", "bookworm-tools", taskDirs(t, filepath.Join(e.repo, "testdata", "tasks", "trial"))...)
	start := time.Now()
	m, stderr, code := e.adapt(t, nil, append([]string{"--tag", prefix + "-trial", "--no-harbor-tools"}, dirs...)...)
	require.Equal(t, 0, code, "adapt failed:\n%s", tail(stderr, 60))
	require.Empty(t, m.Errors)
	figure("adapt of the %d trial tasks in %d groups (over sandboxd-base:bookworm-tools, --no-harbor-tools): %.1fs", len(m.Tasks), len(m.Groups), time.Since(start).Seconds())
	images := map[string]string{}
	tasks := map[string]*task.Task{}
	for _, te := range m.Tasks {
		tk, err := task.Load(te.Dir)
		require.NoError(t, err)
		images[te.Name], tasks[te.Name] = te.Image, tk
	}
	for name, f := range map[string]func(t *testing.T, image string, tk *task.Task){
		"agent-timeout":     e.agentTimeout,
		"agent-error":       e.agentError,
		"healthcheck-late":  e.healthcheckLate,
		"healthcheck-never": e.healthcheckNever,
		"collect":           e.collected,
		"env-interpolation": e.envInterpolation,
		"agent-host":        e.agentHost,
	} {
		require.Contains(t, images, name, "adapt made an image for testdata/tasks/trial/%s", name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, images[name], tasks[name])
		})
	}
	t.Run("files in and out of an image without OpenSSH", func(t *testing.T) {
		t.Parallel()
		e.filesWithoutOpenSSH(t, images["agent-error"])
	})
	t.Run("agent-host behind an upstream proxy", func(t *testing.T) {
		t.Parallel()
		e.upstreamProxy(t, images["agent-host"], tasks["agent-host"])
	})
}

// The oracle works on past agent.timeout_sec. The harness stops waiting at
// the timeout but leaves the session running, as Harbor leaves an agent's
// processes; it marks the outcome and grades with the agent still at work.
func (e *env) agentTimeout(t *testing.T, image string, tk *task.Task) {
	c := e.runContainer(t, image, securityFlags(e.repo))
	a := e.startAgent(t, c.IP, oracleCommand(tk), tk.SolutionScript)
	_, ended := a.wait(tk.Agent.Timeout)
	require.False(t, ended, "the oracle works past agent.timeout_sec")
	e.agentDone(t, c.ID, grade.Agent{Status: grade.AgentTimeout, ExitCode: -1, DurationSec: time.Since(a.start).Seconds()}, a.remote)

	v := e.grade(t, c.ID, 2*time.Minute)
	require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)
	reward, _ := v.reward()
	assert.Equal(t, 1.0, reward, v.Stdout)
	assert.Contains(t, v.Stdout, "the agent is still running while it is graded", "graded with the agent at work")

	a.close() // the harness ends the agent afterwards; its session's record follows
	e.checkAgentRecords(t, c.ID, a.remote, grade.AgentTimeout, -1)
}

// The oracle exits 3 after writing its answer: the harness marks the error
// with the exit code and grades anyway.
func (e *env) agentError(t *testing.T, image string, tk *task.Task) {
	c := e.runContainer(t, image, securityFlags(e.repo))
	a := e.startAgent(t, c.IP, oracleCommand(tk), tk.SolutionScript)
	code, ended := a.wait(tk.Agent.Timeout)
	require.True(t, ended, "the oracle ends by itself")
	require.Equal(t, 3, code)
	e.agentDone(t, c.ID, grade.Agent{Status: grade.AgentError, ExitCode: code, DurationSec: time.Since(a.start).Seconds()}, a.remote)

	v := e.grade(t, c.ID, 2*time.Minute)
	require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)
	reward, _ := v.reward()
	assert.Equal(t, 1.0, reward, v.Stdout)
	e.checkAgentRecords(t, c.ID, a.remote, grade.AgentError, 3)
}

// The image's entrypoint makes the service ready after 2 s. status --ready
// (the image's HEALTHCHECK) says ready only once the task's healthcheck has
// passed, never while the service is missing, and Docker's health state
// follows; the harness lets the oracle in then, and it finds the service.
func (e *env) healthcheckLate(t *testing.T, image string, tk *task.Task) {
	c := e.runContainer(t, image, securityFlags(e.repo))
	// The file is looked at after the answer: a ready answer with no file
	// after it would be a gate that opened early.
	probe := sandboxdBin + " status --ready; test -e " + shq(filepath.Join(tk.Workdir(), "ready")) + " && echo service-up || echo service-down"
	early := 0
	for i := 0; ; i++ {
		out, _ := dockerErr(context.Background(), "exec", c.ID, "sh", "-c", probe)
		require.NotContains(t, out, "ready\nservice-down", "status --ready said ready before the service was up")
		if strings.HasPrefix(out, "ready\n") {
			break
		}
		if strings.Contains(out, "service-down") {
			assert.Contains(t, out, "not ready: the task's healthcheck has not passed yet")
			early++
		}
		require.Less(t, i, 600, "status --ready never said ready: %s", out)
		time.Sleep(100 * time.Millisecond)
	}
	figure("healthcheck-late: status --ready said not ready %d times while the service was down", early)
	health := e.waitDockerHealth(t, c.ID, "healthy")
	assert.Equal(t, "ready\n", health.lastOutput(), "the image's HEALTHCHECK is status --ready")
	docker(t, "exec", c.ID, "test", "-e", filepath.Join(tk.Workdir(), "ready"))
	out, err := dockerErr(context.Background(), "exec", c.ID, sandboxdBin, "status", "--ready")
	require.NoError(t, err)
	assert.Equal(t, "ready\n", out)
	assert.Equal(t, "healthy", e.status(t, c.ID).Health)

	ctx, cancel := context.WithTimeout(context.Background(), tk.Agent.Timeout)
	defer cancel()
	out, err = e.sshRun(ctx, c.IP, oracleCommand(tk), tk.SolutionScript)
	require.NoError(t, err, "the oracle found the service: %s", out)
	v := e.grade(t, c.ID, 2*time.Minute)
	require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)
	reward, _ := v.reward()
	assert.Equal(t, 1.0, reward, v.Stdout)
}

// A healthcheck that never passes: sandboxd's status says unhealthy with
// the check's output, status --ready stays non-zero and names it, and
// Docker's health state turns unhealthy, so that a harness never starts
// the agent phase. Sessions are still served.
func (e *env) healthcheckNever(t *testing.T, image string, _ *task.Task) {
	c := e.runContainer(t, image, securityFlags(e.repo))
	var st statusDoc
	for i := 0; ; i++ {
		if st = e.status(t, c.ID); st.Health == "unhealthy" {
			break
		}
		require.Less(t, i, 600, "sandboxd's status never said unhealthy (last: %q)", st.Health)
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, st.HealthOutput, "the service is not up")
	out, err := dockerErr(context.Background(), "exec", c.ID, sandboxdBin, "status", "--ready")
	require.Error(t, err, "status --ready exits non-zero")
	assert.Contains(t, out, "not ready: the task's healthcheck has not passed yet (unhealthy)")

	health := e.waitDockerHealth(t, c.ID, "unhealthy")
	assert.Contains(t, health.lastOutput(), "the task's healthcheck has not passed yet")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err = e.sshRun(ctx, c.IP, "echo served", "")
	require.NoError(t, err, out)
	assert.Equal(t, "served\n", out)
}

// After grading, the collect hooks run and the artifacts are copied into
// the harness dir, where the harness reads them out with docker cp.
func (e *env) collected(t *testing.T, image string, tk *task.Task) {
	c := e.runContainer(t, image, securityFlags(e.repo))
	ctx, cancel := context.WithTimeout(context.Background(), tk.Agent.Timeout)
	defer cancel()
	out, err := e.sshRun(ctx, c.IP, oracleCommand(tk), tk.SolutionScript)
	require.NoError(t, err, out)
	v := e.grade(t, c.ID, 2*time.Minute)
	require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)

	col := v.Collected
	require.NotNil(t, col, "the verdict says what was collected")
	assert.True(t, strings.HasPrefix(col.Dir, "/media/sandboxd/collected/"), "in the harness dir: %s", col.Dir)
	require.Len(t, col.Hooks, 2)
	assert.Equal(t, 0, col.Hooks[0].ExitCode, col.Hooks[0].Error)
	assert.Equal(t, "snapshot taken\n", col.Hooks[0].Output)
	assert.True(t, col.Hooks[1].TimedOut, "the second hook has a timeout of its own")
	require.Len(t, col.Artifacts, 2)
	assert.Equal(t, "collected", col.Artifacts[0].Status)
	assert.Equal(t, "agent-logs", col.Artifacts[1].Destination)
	assert.Equal(t, "partial", col.Artifacts[1].Status, "the planted link is left behind, and said so")
	assert.Contains(t, strings.Join(col.Artifacts[1].Skipped, "\n"), "shadow: a symlink, not followed")

	kept := filepath.Join(t.TempDir(), "collected")
	docker(t, "cp", c.ID+":"+col.Dir, kept)
	for rel, body := range map[string]string{
		col.Artifacts[0].Destination: "42\n",
		col.Hooks[1].OutputFile:      "started\n",
		"agent-logs/notes.txt":       "solved\n",
		"agent-logs/run/1.log":       "step 1\n",
	} {
		b, err := os.ReadFile(filepath.Join(kept, rel))
		require.NoError(t, err)
		assert.Equal(t, body, string(b), rel)
	}
	for _, rel := range []string{"agent-logs/run/scratch.tmp", "agent-logs/shadow"} {
		_, err := os.Lstat(filepath.Join(kept, rel))
		assert.True(t, os.IsNotExist(err), "%s is not collected", rel)
	}
}

// The task's env references take their values from `docker run -e`, the
// container's environment, in every phase: the agent's session sees them,
// and the oracle's answer (with the solution's env, which the harness
// expands from the same values, as Harbor's oracle agent does) matches
// what the verifier's env expects.
func (e *env) envInterpolation(t *testing.T, image string, tk *task.Task) {
	given := map[string]string{"TASKTEST_WHO": "docker", "TASKTEST_N": "3"}
	var extra []string
	for k, v := range given {
		extra = append(extra, "-e", k+"="+v)
	}
	c := e.runContainer(t, image, securityFlags(e.repo), extra...)
	ctx, cancel := context.WithTimeout(context.Background(), tk.Agent.Timeout)
	defer cancel()
	out, err := e.sshRun(ctx, c.IP, `echo "$GREETING"`, "")
	require.NoError(t, err, out)
	assert.Equal(t, "hello-docker-3\n", out, "[environment].env, embedded references filled from docker run -e")

	require.NoError(t, tk.ExpandEnv(func(k string) (string, bool) { v, ok := given[k]; return v, ok }))
	command := "cd " + shq(tk.Workdir()) + " && env " + shellWords(tk.SolutionEnv().Environ()) + " bash -s"
	out, err = e.sshRun(ctx, c.IP, command, tk.SolutionScript)
	require.NoError(t, err, out)
	v := e.grade(t, c.ID, 2*time.Minute)
	require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)
	reward, _ := v.reward()
	assert.Equal(t, 1.0, reward, v.Stdout)
	assert.Contains(t, v.Stdout, "PASS: answer.txt holds 'greeting=hello-docker-3; mode=oracle'")
}

// A no-network task whose agent must reach a host: `-e
// SANDBOXD_ALLOW_AGENT_HOST` lifts the agent phase, and only it, as
// --allow-agent-host does; status and the audit log name the addition.
// Without it the oracle cannot fetch. The host is the test upstream in a
// container of its own, on a network the test makes, known by its names to
// the engine's DNS (as a compose service is): the sandbox's resolver asks
// it, and the egress judges the answered address by name.
func (e *env) agentHost(t *testing.T, image string, tk *task.Task) {
	network, ip := e.upstreamHost(t)
	for _, tc := range []struct {
		name   string
		env    []string
		reward float64
	}{
		{"with the run-time host", []string{"-e", "SANDBOXD_ALLOW_AGENT_HOST=allowed.sandboxd.test"}, 1},
		{"without it", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The test host's private address, which the egress guard
			// refuses unless opened; given, it replaces the task's own.
			extra := append([]string{"--network", network, "-e", "SANDBOXD_EGRESS_ALLOW_CIDR=" + ip + "/32"}, tc.env...)
			c := e.runContainer(t, image, securityFlags(e.repo), extra...)
			ctx, cancel := context.WithTimeout(context.Background(), tk.Agent.Timeout)
			defer cancel()
			out, err := e.sshRun(ctx, c.IP, oracleCommand(tk), tk.SolutionScript)
			v := e.grade(t, c.ID, 2*time.Minute)
			audit, _ := dockerErr(context.Background(), "exec", c.ID, "cat", "/media/sandboxd/audit/egress.log")
			assert.Equal(t, tc.reward == 1, err == nil, "the oracle's fetch: %s\naudit log:\n%s", out, audit)
			require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)
			reward, _ := v.reward()
			assert.Equal(t, tc.reward, reward, v.Stdout)

			st := e.status(t, c.ID)
			if tc.env == nil {
				assert.NotContains(t, audit, "runtime-hosts")
				assert.Empty(t, st.Network.RuntimeHosts)
				return
			}
			assert.Contains(t, string(st.Network.RuntimeHosts), "allowed.sandboxd.test", "status names the run-time addition")
			assert.Contains(t, audit, `"msg":"runtime-hosts","proxy":"agent","mode":"allowlist","allowed_hosts":["allowed.sandboxd.test"],"added_at_run_time":["allowed.sandboxd.test"]`)
			assert.Contains(t, audit, `"proxy":"caught:agent"`, "the agent's fetch went through the egress")
			assert.NotContains(t, audit, `"proxy":"verifier","mode"`, "the verifier's policy gained nothing")
		})
	}
}

// upstreamProxy runs the agent-host task behind a company proxy: the
// container's HTTPS_PROXY and HTTP_PROXY name a tinyproxy on the test
// network's gateway, which alone resolves the upstream's name. The agent's
// fetch (no proxy variable in its session) is caught, allowed by the
// run-time host, and carried by the upstream proxy as CONNECT name:port.
func (e *env) upstreamProxy(t *testing.T, image string, tk *task.Task) {
	network, ip := e.upstreamHost(t)
	gateway := strings.TrimSpace(docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network))
	proxy, proxyLog := sandboxtest.StartTinyproxy(t, gateway, map[string]string{"allowed.sandboxd.test": ip})
	c := e.runContainer(t, image, securityFlags(e.repo), "--network", network,
		"-e", "SANDBOXD_EGRESS_ALLOW_CIDR="+ip+"/32", "-e", "SANDBOXD_ALLOW_AGENT_HOST=allowed.sandboxd.test",
		"-e", "HTTPS_PROXY=http://"+proxy, "-e", "HTTP_PROXY=http://"+proxy, "-e", "NO_PROXY=localhost")
	ctx, cancel := context.WithTimeout(context.Background(), tk.Agent.Timeout)
	defer cancel()
	env, err := e.sshRun(ctx, c.IP, "env | grep -ci _proxy || true", "")
	require.NoError(t, err)
	assert.Equal(t, "0\n", env, "no proxy variable reaches the session")
	out, err := e.sshRun(ctx, c.IP, oracleCommand(tk), tk.SolutionScript)
	require.NoError(t, err, "the oracle's fetch through the upstream proxy: %s", out)
	v := e.grade(t, c.ID, 2*time.Minute)
	require.Equal(t, "graded", v.Status, "%s\n%s", v.Message, v.Stdout)
	reward, _ := v.reward()
	assert.Equal(t, 1.0, reward, v.Stdout)
	log, _ := os.ReadFile(proxyLog)
	assert.Contains(t, string(log), "CONNECT allowed.sandboxd.test:18080", "the upstream proxy carried the name")
	st := docker(t, "exec", c.ID, sandboxdBin, "status")
	assert.Contains(t, st, `"upstream_proxy"`)
	assert.Contains(t, st, "http://"+proxy)
}

// upstreamHost runs the test upstream (testdata/tasks/README.md) as a test
// host: a container of its own on a fresh network, under upstreamNames as
// network aliases. It returns the network and the host's address.
func (e *env) upstreamHost(t *testing.T) (network, ip string) {
	t.Helper()
	network = "sandboxd-e2e-" + randomSuffix()
	docker(t, "network", "create", network)
	t.Cleanup(func() { dockerErr(context.Background(), "network", "rm", network) })
	args := []string{"run", "-d", "--label", "org.sandboxd.e2e=1", "--network", network}
	for _, name := range upstreamNames {
		args = append(args, "--network-alias", name)
	}
	args = append(args, "-v", e.upstreamBin+":/upstream:ro", "-v", filepath.Join(e.repo, "testdata", "tasks", "upstream")+":/files:ro",
		"sandboxd-base:bookworm", "/upstream", "-listen", "0.0.0.0:18080", "-dir", "/files")
	id := strings.TrimSpace(docker(t, args...))
	t.Cleanup(func() { dockerErr(context.Background(), "rm", "-f", id) })
	return network, containerIP(t, id)
}

func oracleCommand(tk *task.Task) string { return "cd " + shq(tk.Workdir()) + " && bash -s" }

func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shq(w)
	}
	return strings.Join(q, " ")
}

// statusDoc is the part of `sandboxd status` these tests read.
type statusDoc struct {
	Health       string `json:"health"`
	HealthOutput string `json:"health_output"`
	Network      struct {
		RuntimeHosts json.RawMessage `json:"runtime_hosts"`
	} `json:"network"`
}

func (e *env) status(t *testing.T, id string) statusDoc {
	t.Helper()
	var st statusDoc
	out := docker(t, "exec", id, sandboxdBin, "status")
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// dockerHealth is `docker inspect`'s .State.Health.
type dockerHealth struct {
	Status string
	Log    []struct {
		ExitCode int
		Output   string
	}
}

func (h dockerHealth) lastOutput() string {
	if len(h.Log) == 0 {
		return ""
	}
	return h.Log[len(h.Log)-1].Output
}

// waitDockerHealth waits for the engine's health state of the container,
// as set by the image's HEALTHCHECK, to become want.
func (e *env) waitDockerHealth(t *testing.T, id, want string) dockerHealth {
	t.Helper()
	var h dockerHealth
	for i := 0; ; i++ {
		out := docker(t, "inspect", "--format", "{{json .State.Health}}", id)
		require.NoError(t, json.Unmarshal([]byte(out), &h), out)
		if h.Status == want {
			return h
		}
		require.Less(t, i, 900, "the container's health stayed %q, not %q: %s", h.Status, want, h.lastOutput())
		time.Sleep(100 * time.Millisecond)
	}
}

// agentSession is the agent's SSH session as a harness that drives serve
// holds it: through the Go SSH client, which tells the harness the client
// address the daemon records the session under (agent-done --remote).
type agentSession struct {
	remote string
	start  time.Time
	client *ssh.Client
	done   chan error
	once   sync.Once
}

func (e *env) startAgent(t *testing.T, ip, command, stdinFile string) *agentSession {
	t.Helper()
	key, err := os.ReadFile(e.privKey)
	require.NoError(t, err)
	signer, err := ssh.ParsePrivateKey(key)
	require.NoError(t, err)
	addr := net.JoinHostPort(ip, "2222")
	nc, err := net.DialTimeout("tcp", addr, 15*time.Second)
	require.NoError(t, err)
	cc, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{
		User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		// As the OpenSSH client of sshRun is told StrictHostKeyChecking=no.
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
	})
	require.NoError(t, err)
	a := &agentSession{remote: nc.LocalAddr().String(), client: ssh.NewClient(cc, chans, reqs), done: make(chan error, 1)}
	t.Cleanup(a.close)
	sess, err := a.client.NewSession()
	require.NoError(t, err)
	if stdinFile != "" {
		b, err := os.ReadFile(stdinFile)
		require.NoError(t, err)
		sess.Stdin = bytes.NewReader(b)
	}
	a.start = time.Now()
	require.NoError(t, sess.Start(command))
	go func() { a.done <- sess.Wait() }()
	return a
}

// wait waits for the session to end, at most timeout (the agent's), and
// returns its exit code; ended is false when the timeout came first.
func (a *agentSession) wait(timeout time.Duration) (code int, ended bool) {
	select {
	case err := <-a.done:
		var ee *ssh.ExitError
		if errors.As(err, &ee) {
			return ee.ExitStatus(), true
		}
		if err != nil {
			return -1, true
		}
		return 0, true
	case <-time.After(timeout):
		return -1, false
	}
}

func (a *agentSession) close() { a.once.Do(func() { a.client.Close() }) }

// agentDone marks the agent's outcome as a harness does, on the control
// socket through docker exec.
func (e *env) agentDone(t *testing.T, id string, ag grade.Agent, remote string) {
	t.Helper()
	docker(t, "exec", id, sandboxdBin, "agent-done", "--status", string(ag.Status), "--exit-code", fmt.Sprint(ag.ExitCode),
		"--duration", fmt.Sprint(ag.DurationSec), "--remote", remote)
}

// checkAgentRecords checks that `sandboxd records` holds the harness's mark
// and shows the same outcome on the agent's own SSH session, named by its
// client address. A session's record is written when it ends.
func (e *env) checkAgentRecords(t *testing.T, id, remote string, status grade.AgentStatus, code int) {
	t.Helper()
	var mark, session *records.Record
	for i := 0; session == nil; i++ {
		require.Less(t, i, 300, "the agent's session %s is not in the records", remote)
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		for _, line := range strings.Split(strings.TrimSpace(docker(t, "exec", id, sandboxdBin, "records")), "\n") {
			var r records.Record
			require.NoError(t, json.Unmarshal([]byte(line), &r), line)
			switch {
			case r.Kind == "agent":
				mark = &r
			case r.Via == "ssh" && r.Remote == remote:
				session = &r
			}
		}
	}
	require.NotNil(t, mark, "the harness's mark is on the record")
	assert.Equal(t, remote, mark.Remote)
	for _, r := range []*records.Record{mark, session} {
		require.NotNil(t, r.Agent, "%+v", r)
		assert.Equal(t, status, r.Agent.Status)
		assert.Equal(t, code, r.Agent.ExitCode)
	}
	if status == grade.AgentError {
		assert.Equal(t, code, session.Exit, "the session's own exit")
	}
}
