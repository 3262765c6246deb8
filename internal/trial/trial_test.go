package trial

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/layer"
	"github.com/sandboxd/sandboxd/pkg/task"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

const tasksDir = "../../testdata/tasks"

// The test upstream of testdata/tasks/README.md: the files of upstream/ and
// a fresh /token per trial on port 18080 of a test host, in a network
// namespace of the test's own. Not on a loopback address of the
// substrate: the sandbox's resolver hands the agent the address itself,
// and a caught connection to a loopback address stays in the sandbox's
// own loopback.
const upstreamPort = 18080

// upstreamNames are the names that lead to the upstream.
var upstreamNames = []string{"allowed.sandboxd.test", "refused.sandboxd.test", "tools.sandboxd.test"}

// upstream is the test upstream as a trial reaches it.
type upstream struct {
	// newTrial gives /token a fresh value, the same for every request of one trial.
	newTrial func()
	// resolver is the daemon's: a snapshot of an empty hosts file,
	// forwarding to a test name server that answers upstreamNames with the
	// test host's address and nothing else (no real name is ever asked).
	resolver *egress.SnapshotResolver
	// cidrs open the test host's address, which the address guard refuses
	// as private; given to a trial, they replace the task's own.
	cidrs []string
}

func startTaskUpstream(t *testing.T) upstream {
	var token atomic.Value
	u := upstream{newTrial: func() {
		var b [12]byte
		rand.Read(b[:])
		token.Store(hex.EncodeToString(b[:]) + "\n")
	}}
	u.newTrial()
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(filepath.Join(tasksDir, "upstream"))))
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(token.Load().(string)))
	})
	host := sandboxtest.NewTestHost(t)
	srv := &http.Server{Handler: mux}
	go srv.Serve(host.Listen(t, upstreamPort))
	t.Cleanup(func() { srv.Close() })

	addr := host.Addr.As4()
	zone := sandboxtest.StartDNSZone(t, func(q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
		name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
		if !slices.Contains(upstreamNames, name) {
			return dnsmessage.RCodeNameError, nil
		}
		if q.Type != dnsmessage.TypeA {
			return 0, nil
		}
		return 0, []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 300}, Body: &dnsmessage.AResource{A: addr}}}
	})
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644))
	r, err := egress.NewSnapshotResolver(hosts, filepath.Join(dir, "resolv.conf"))
	require.NoError(t, err)
	u.resolver = r.WithServers(zone.Addr)
	u.cidrs = []string{netip.PrefixFrom(host.Addr, 32).String()}
	return u
}

// TestTrial_OwnTasks runs every task of testdata/tasks through Run — the
// oracle over a real SSH session, then the agent that does nothing — and
// checks what each task's metadata says it must score.
func TestTrial_OwnTasks(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	up := startTaskUpstream(t)
	ran := 0
	eachAgent(t, tasksDir, func(t *testing.T, dir string, tk *task.Task, agent string, want expect) {
		up.newTrial()
		var cidrs []string
		if needs, _ := tk.Metadata["sandboxd_needs"].([]any); slices.Contains(needs, any("upstream")) {
			cidrs = up.cidrs
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		v, err := Run(ctx, Config{TaskDir: dir, Agent: agent, Resolver: up.resolver, AllowCIDRs: cidrs, Log: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		want.check(t, v.Verdict)
		ran++
	})
	assert.GreaterOrEqual(t, ran, 20, "every task ran its oracle and its nop")
}

// harborTasksDir holds the tasks of Harbor's trial semantics: the agent's
// outcome, the healthcheck before the agent phase, and schema 1.4's keys.
const harborTasksDir = tasksDir + "/trial"

// TestTrial_HarborTasks runs every task of testdata/tasks/trial through Run
// with the oracle and nop, and checks the verdict, the agent's outcome
// ([metadata] sandboxd_expect_agent_<agent>, "completed" when absent) and
// trial's exit code.
func TestTrial_HarborTasks(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	ran := 0
	eachAgent(t, harborTasksDir, func(t *testing.T, dir string, tk *task.Task, agent string, want expect) {
		require.Empty(t, tk.Warnings)
		if _, ok := tk.Metadata["sandboxd_needs"]; ok {
			return // run by a test of its own, with what it needs
		}
		wantAgent, _ := tk.Metadata["sandboxd_expect_agent_"+agent].(string)
		if wantAgent == "" {
			wantAgent = "completed"
		}
		agentStatus, agentCode, _ := strings.Cut(wantAgent, ":")
		if tk.Name == "env-interpolation" && agent == "oracle" {
			// One reference from the host, the others from their defaults.
			t.Setenv("TASKTEST_N", "7")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		kept := filepath.Join(t.TempDir(), "artifacts")
		v, err := Run(ctx, Config{TaskDir: dir, Agent: agent, ArtifactsDir: kept, Log: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		want.check(t, v.Verdict)
		ran++
		if tk.Name == "collect" && agent == "oracle" {
			checkCollected(t, v.Verdict, kept)
		}
		if v.Status == grade.StatusUnhealthy {
			assert.Nil(t, v.Agent, "no agent runs before the healthcheck passes")
			assert.Nil(t, v.Reward)
			assert.Contains(t, v.Message, "the service is not up", "the check's own output says why")
			assert.Equal(t, grade.ExitUnhealthy, v.Exit())
			return
		}
		require.NotNil(t, v.Agent)
		assert.Equal(t, grade.AgentStatus(agentStatus), v.Agent.Status, v.Agent.Message)
		if agentCode != "" {
			assert.Equal(t, agentCode, strconv.Itoa(v.Agent.ExitCode))
		}
		if v.Agent.Status == grade.AgentTimeout {
			assert.Contains(t, v.StdoutTail, "the agent is still running while it is graded", "as under Harbor, the timeout kills nothing")
			assert.Equal(t, -1, v.Agent.ExitCode)
			assert.GreaterOrEqual(t, v.Agent.DurationSec, tk.Agent.Timeout.Seconds())
			assert.Equal(t, grade.ExitAgentTimeout, v.Exit(), "a graded run whose agent timed out has its own exit code")
		} else {
			assert.Equal(t, grade.ExitGraded, v.Exit())
		}
	})
	assert.GreaterOrEqual(t, ran, 12)
}

// expect is what a task's [metadata] sandboxd_expect_<agent> says a trial
// must give: "status" or "status:reward".
type expect struct{ status, reward string }

func (e expect) check(t *testing.T, v grade.Verdict) {
	t.Helper()
	require.Equal(t, grade.Status(e.status), v.Status, "%s\n%s", v.Message, v.StdoutTail)
	if e.reward != "" {
		r, err := strconv.ParseFloat(e.reward, 64)
		require.NoError(t, err)
		assert.Equal(t, r, v.Reward["reward"], v.StdoutTail)
	}
}

// eachAgent runs run for the oracle and the nop of every task in dir, each
// as a subtest, with what the task expects of it.
func eachAgent(t *testing.T, dir string, run func(t *testing.T, dir string, tk *task.Task, agent string, want expect)) {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		taskDir := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(taskDir, "task.toml")); err != nil {
			continue // upstream/, trial/, the README
		}
		tk, err := task.Load(taskDir)
		require.NoError(t, err)
		for _, agent := range []string{"oracle", "nop"} {
			t.Run(e.Name()+"/"+agent, func(t *testing.T) {
				want, ok := tk.Metadata["sandboxd_expect_"+agent].(string)
				require.True(t, ok, "task.toml [metadata] sandboxd_expect_%s", agent)
				status, reward, _ := strings.Cut(want, ":")
				run(t, taskDir, tk, agent, expect{status, reward})
			})
		}
	}
}

// A reference with neither a host value nor a default refuses the trial
// before anything runs, naming the variable, as Harbor refuses the run.
func TestTrial_UnsetEnvWithoutDefaultRefuses(t *testing.T) {
	sandboxtest.RequireRoot(t)
	dir := t.TempDir()
	for name, body := range map[string]string{
		"task.toml":      "[environment]\nworkdir = \"/tmp/sandboxd-tasks/unset-env\"\n[verifier.env]\nTOKEN = \"Bearer ${TASKTEST_UNSET_TOKEN}\"\n",
		"instruction.md": "nothing",
		"tests/test.sh":  "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755))
	}
	_, err := Run(context.Background(), Config{TaskDir: dir, Agent: "nop", Log: slog.New(slog.DiscardHandler)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "verifier.env.TOKEN: TOKEN needs TASKTEST_UNSET_TOKEN from the host, and it is not set")
	assert.NoDirExists(t, "/tmp/sandboxd-tasks/unset-env", "nothing ran")
}

// checkCollected checks what trial/collect's oracle leaves, once graded:
// the hooks' outcomes with their output beside the verdict, and the
// artifacts kept where trial was told, without the excluded files and
// without the link to /etc/shadow followed.
func checkCollected(t *testing.T, v grade.Verdict, kept string) {
	t.Helper()
	c := v.Collected
	require.NotNil(t, c, "the verdict says what was collected")
	assert.Equal(t, kept, c.Dir, "kept past the trial's harness dir")
	require.Len(t, c.Hooks, 2)
	assert.Equal(t, 0, c.Hooks[0].ExitCode, c.Hooks[0].Error)
	assert.Equal(t, "snapshot taken\n", c.Hooks[0].Output)
	assert.True(t, c.Hooks[1].TimedOut, "the second hook has a timeout of its own")
	assert.Equal(t, -1, c.Hooks[1].ExitCode)
	out, err := os.ReadFile(filepath.Join(kept, c.Hooks[1].OutputFile))
	require.NoError(t, err)
	assert.Equal(t, "started\n", string(out), "a hook's whole output is kept beside the verdict")
	require.Len(t, c.Artifacts, 2)
	assert.Equal(t, "collected", c.Artifacts[0].Status)
	snap, err := os.ReadFile(filepath.Join(kept, c.Artifacts[0].Destination))
	require.NoError(t, err)
	assert.Equal(t, "42\n", string(snap), "the hook ran before the artifacts were copied")
	assert.Equal(t, "agent-logs", c.Artifacts[1].Destination)
	assert.Equal(t, "partial", c.Artifacts[1].Status, "the planted link is left behind, and said so")
	assert.Contains(t, strings.Join(c.Artifacts[1].Skipped, "\n"), "shadow: a symlink, not followed")
	for rel, body := range map[string]string{"agent-logs/notes.txt": "solved\n", "agent-logs/run/1.log": "step 1\n"} {
		b, err := os.ReadFile(filepath.Join(kept, rel))
		require.NoError(t, err)
		assert.Equal(t, body, string(b))
	}
	for _, rel := range []string{"agent-logs/run/scratch.tmp", "agent-logs/shadow"} {
		_, err := os.Lstat(filepath.Join(kept, rel))
		assert.True(t, os.IsNotExist(err), "%s is not collected", rel)
	}
	_, err = os.Stat(filepath.Join(kept, "manifest.json"))
	assert.NoError(t, err)
}

// --allow-agent-host lifts a no-network task's agent phase, and only it, to
// an allowlist of that host, as harbor run's flag does; the audit log names
// the addition apart from the task's policy. Without it, the oracle cannot
// reach the host.
func TestTrial_AllowAgentHostUnderNoNetwork(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	up := startTaskUpstream(t)
	dir := filepath.Join(harborTasksDir, "agent-host")
	for _, tc := range []struct {
		name   string
		hosts  []string
		reward float64
	}{
		{"with the run-time host", []string{"allowed.sandboxd.test"}, 1},
		{"without it", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.newTrial()
			harness, err := os.MkdirTemp("/media", "sandboxd-trial-test-")
			require.NoError(t, err)
			defer os.RemoveAll(harness)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			v, err := Run(ctx, Config{TaskDir: dir, Agent: "oracle", HarnessDir: harness, AgentHosts: tc.hosts,
				Resolver: up.resolver, AllowCIDRs: up.cidrs, Log: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
			assert.Equal(t, tc.reward, v.Reward["reward"], v.StdoutTail)
			audit, err := os.ReadFile(filepath.Join(harness, "audit", "egress.log"))
			if tc.hosts == nil {
				assert.NotContains(t, string(audit), "runtime-hosts")
				return
			}
			require.NoError(t, err)
			assert.Contains(t, string(audit), `"msg":"runtime-hosts","proxy":"agent","mode":"allowlist","allowed_hosts":["allowed.sandboxd.test"],"added_at_run_time":["allowed.sandboxd.test"]`)
			assert.NotContains(t, string(audit), `"proxy":"verifier","mode"`, "the verifier's policy gained nothing")
		})
	}
}

// trial marks its agent's outcome (agent-done), and the record of the
// agent's own SSH session is named by its client address.
func TestTrial_RecordsMarkTheAgentsSession(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	harness, err := os.MkdirTemp("/media", "sandboxd-trial-test-")
	require.NoError(t, err)
	defer os.RemoveAll(harness)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, err := Run(ctx, Config{TaskDir: filepath.Join(harborTasksDir, "agent-error"), Agent: "oracle", HarnessDir: harness, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NotNil(t, v.Agent)
	recs, err := records.Read(filepath.Join(harness, "records"), records.Filter{})
	require.NoError(t, err)
	var mark, session *records.Record
	for i := range recs {
		switch {
		case recs[i].Kind == "agent":
			mark = &recs[i]
		case recs[i].Via == "ssh" && recs[i].Command != "":
			session = &recs[i]
		}
	}
	require.NotNil(t, mark, "the agent's outcome is on the record")
	require.NotNil(t, session, "the agent's session is on the record")
	assert.Equal(t, *v.Agent, *mark.Agent)
	assert.Equal(t, session.Remote, mark.Remote, "the mark names the agent's session")
	assert.Equal(t, 3, session.Exit)
}

// The result says which of Harbor's agent tools the agent had, probed on
// the PATH its sessions get (the task's, here a directory of the test's
// own): the same programs the agent's own shell finds, and nothing of the
// daemon's PATH. The JSON trial prints carries them beside the verdict.
func TestTrial_HarborToolsOnTheAgentsPath(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	bin := t.TempDir()
	for _, name := range []string{"python3", "git"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\necho "+name+"\n"), 0o755))
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"task.toml":      "[environment]\nworkdir = \"/tmp/sandboxd-tasks/harbor-tools\"\nnetwork_mode = \"no-network\"\n[environment.env]\nPATH = \"" + bin + "\"\n",
		"instruction.md": "nothing",
		"tests/test.sh":  "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seen sandboxtest.Buffer // both streams, from two goroutines
	r, err := Run(ctx, Config{TaskDir: dir, Agent: "command -v python3 pip3 pip git curl", Stderr: &seen, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.Equal(t, grade.StatusGraded, r.Status, r.Message)
	assert.Equal(t, []layer.ToolEntry{
		{Tool: "python3", Status: layer.ToolPresent, Path: filepath.Join(bin, "python3")},
		{Tool: "pip", Status: layer.ToolMissing},
		{Tool: "git", Status: layer.ToolPresent, Path: filepath.Join(bin, "git")},
		{Tool: "curl", Status: layer.ToolMissing},
	}, r.HarborTools)
	assert.Equal(t, filepath.Join(bin, "python3")+"\n"+filepath.Join(bin, "git")+"\n", seen.String(), "what the agent's own shell finds")

	var out bytes.Buffer
	assert.Equal(t, 0, r.Print(&out, io.Discard))
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc), out.String())
	assert.JSONEq(t, `"graded"`, string(doc["status"]), "the verdict's fields stay at the top")
	assert.JSONEq(t, `[{"tool":"python3","status":"present","path":"`+filepath.Join(bin, "python3")+`"},{"tool":"pip","status":"missing"},`+
		`{"tool":"git","status":"present","path":"`+filepath.Join(bin, "git")+`"},{"tool":"curl","status":"missing"}]`, string(doc["harbor_tools"]))
}
