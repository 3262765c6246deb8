package grade_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/grade"
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
