package grade_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// tasksDir holds our own Harbor tasks, shaped like Terminal-Bench 2's.
const tasksDir = "../../testdata/tasks"

// ownTasks loads every task in testdata/tasks.
func ownTasks(t *testing.T) []*task.Task {
	t.Helper()
	entries, err := os.ReadDir(tasksDir)
	require.NoError(t, err)
	var out []*task.Task
	for _, e := range entries {
		dir := filepath.Join(tasksDir, e.Name())
		if _, err := os.Stat(filepath.Join(dir, task.PathTaskTOML)); err != nil {
			continue // upstream/, the README
		}
		abs, err := filepath.Abs(dir)
		require.NoError(t, err)
		tk, err := task.Load(abs)
		require.NoError(t, err, "task %s", e.Name())
		out = append(out, tk)
	}
	require.GreaterOrEqual(t, len(out), 10)
	return out
}

// expectation is what a trial of the task must give for an agent, from the
// task's [metadata] sandboxd_expect_<agent> ("graded:1", "verifier_timeout").
func expectation(t *testing.T, tk *task.Task, agent string) (grade.Status, float64) {
	t.Helper()
	s, ok := tk.Metadata["sandboxd_expect_"+agent].(string)
	require.True(t, ok, "%s: [metadata] sandboxd_expect_%s is missing", tk.Name, agent)
	status, reward, hasReward := strings.Cut(s, ":")
	if !hasReward {
		return grade.Status(status), 0
	}
	x, err := strconv.ParseFloat(reward, 64)
	require.NoError(t, err)
	return grade.Status(status), x
}

func needs(tk *task.Task) []string {
	var out []string
	if l, ok := tk.Metadata["sandboxd_needs"].([]any); ok {
		for _, v := range l {
			out = append(out, fmt.Sprint(v))
		}
	}
	return out
}

// The tasks tests are TestClients_: they need the repository's testdata and
// the tools the tasks drive (python3, git, sshd, curl), which the minimal
// images of the container test runs do not carry.
func TestClients_OwnTasksLoad(t *testing.T) {
	for _, tk := range ownTasks(t) {
		assert.Empty(t, tk.Warnings, tk.Name)
		assert.NotEmpty(t, tk.SolutionScript, "%s: every task has an oracle", tk.Name)
		assert.NotEmpty(t, tk.Dockerfile, "%s: every task has an environment", tk.Name)
		assert.True(t, strings.HasPrefix(tk.Workdir(), "/tmp"), "%s: workdirs stay under /tmp on a bare host", tk.Name)
		expectation(t, tk, "oracle")
		expectation(t, tk, "nop")
		for _, n := range needs(tk) {
			assert.Contains(t, []string{"egress", "upstream"}, n, tk.Name)
		}
		mode := tk.AgentNetwork().Mode
		if mode != task.NetworkNone && !strings.Contains(tk.Name, "server-left-running") {
			assert.Contains(t, needs(tk), "egress", "%s: a task with agent network %s needs the egress proxy", tk.Name, mode)
		}
	}
}

// TestClients_OwnTasksOracleAndNop runs each task that needs nothing beyond a
// sandbox the way `trial` does — a fresh workdir, the task dir hidden, the
// oracle's solve.sh fed to `bash -s` as the agent user, or nothing at all —
// and grades it. The tasks that need the egress proxy and the test upstream
// run in the trial runner's tests.
func TestClients_OwnTasksOracleAndNop(t *testing.T) {
	sandboxtest.RequireRoot(t)
	for _, tk := range ownTasks(t) {
		if n := needs(tk); len(n) > 0 {
			t.Logf("%s needs %v: run by the trial runner's tests", tk.Name, n)
			continue
		}
		for _, agent := range []string{"oracle", "nop"} {
			t.Run(tk.Name+"/"+agent, func(t *testing.T) {
				testsLeftAsFound(t)
				status, reward := expectation(t, tk, agent)
				v := trial(t, tk, agent == "oracle")
				require.Equal(t, status, v.Status, "%s\n%s", v.Message, v.StdoutTail)
				if status == grade.StatusGraded {
					assert.Equal(t, reward, v.Reward["reward"], v.StdoutTail)
				}
			})
		}
	}
}

func trial(t *testing.T, tk *task.Task, oracle bool) grade.Verdict {
	workdir := tk.Workdir()
	if strings.HasPrefix(workdir, "/tmp/sandboxd-tasks/") {
		// A fresh workdir per trial, as a fresh container has.
		require.NoError(t, os.RemoveAll(workdir))
		require.NoError(t, os.MkdirAll(workdir, 0o755))
		t.Cleanup(func() { os.RemoveAll(workdir) })
	}
	harness := sandboxtest.HarnessDir(t)
	baked := filepath.Join(harness, "tasks", tk.Name, "tests")
	require.NoError(t, os.CopyFS(baked, os.DirFS(filepath.Join(tk.Dir, "tests"))))
	sb := sandboxtest.Start(t, bwrap.Config{Workdir: workdir, Hide: []string{harness, tk.Dir}, Mask: []string{"/logs/verifier"}})

	if oracle {
		u, err := idmap.Lookup("/", tk.AgentUser())
		require.NoError(t, err)
		env := append([]string{"PATH=" + bwrap.DefaultPath, "HOME=" + u.Home}, tk.AgentEnv().Environ()...)
		env = append(env, tk.SolutionEnv().Environ()...)
		st, err := sb.Target.Command(join.Spec{User: u, Env: env, Dir: workdir, Argv: []string{"bash", "-s"}})
		require.NoError(t, err)
		solve, err := os.Open(tk.SolutionScript)
		require.NoError(t, err)
		defer solve.Close()
		// A file, not a pipe: the agent's servers outlive the session.
		out, err := os.CreateTemp(t.TempDir(), "agent-output")
		require.NoError(t, err)
		defer out.Close()
		st.Cmd.Stdin, st.Cmd.Stdout, st.Cmd.Stderr = solve, out, out
		p, err := st.Start()
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- st.Cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			p.KillTree()
			err = <-done
		}
		b, _ := os.ReadFile(out.Name())
		code, _, _ := join.ExitStatus(err)
		require.Equal(t, 0, code, "solve.sh failed: %s", b)
	}

	u, err := idmap.Lookup("/", tk.VerifierUser())
	require.NoError(t, err)
	env := append([]string{"PATH=" + bwrap.DefaultPath, "HOME=" + u.Home}, tk.VerifierEnv().Environ()...)
	v, err := grade.Run(context.Background(), grade.Config{
		Target:     sb.Target,
		HarnessDir: harness,
		Tests:      baked,
		User:       u,
		Env:        env,
		Workdir:    workdir,
		Timeout:    tk.Verifier.Timeout,
		Mask:       []string{tk.Dir},
		LogsDir:    t.TempDir(),
	})
	require.NoError(t, err)
	return v
}
