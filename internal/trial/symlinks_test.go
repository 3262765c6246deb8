package trial

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// A task directory, or a harness dir, named through a symlink is hidden by
// its real path: a uid-1000 agent reads neither the task's tests nor its
// solution there, and grading finds the tests it copies and the mask it
// lays (docs/failures.md#hidden-paths-are-resolved-once-at-start). The
// symlink's own name stays in the agent's view, dangling.
func TestSymlinkedTaskAndHarnessDirsAreHiddenByTheirRealPaths(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	for _, c := range []struct {
		name                  string
		linkTask, linkHarness bool
	}{
		{"task dir through a symlink", true, false},
		{"harness dir through a symlink", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			top, err := os.MkdirTemp("/tmp", "sandboxd-symlinks-")
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(top) })
			// Readable by everyone: only hiding keeps uid 1000 out.
			require.NoError(t, os.Chmod(top, 0o755))
			real := filepath.Join(top, "ut")
			writeReadableTask(t, real)
			taskDir := real
			if c.linkTask {
				taskDir = filepath.Join(top, "utlink")
				require.NoError(t, os.Symlink(real, taskDir))
			}
			var harness string
			if c.linkHarness {
				realHarness := sandboxtest.HarnessDir(t)
				harness = realHarness + "-link"
				require.NoError(t, os.Symlink(realHarness, harness))
				t.Cleanup(func() { os.Remove(harness) })
			}

			probe := strings.NewReplacer("REAL", real, "LINK", taskDir).Replace(
				`id -u; for f in REAL/tests/test.sh REAL/solution/solve.sh LINK/tests/test.sh LINK/solution/solve.sh; do cat "$f" >/dev/null 2>&1 && echo "LEAK $f"; done; test -e REAL && echo "LEAK REAL exists"; echo probed`)
			// One writer for both streams, which the SSH client fills from two
			// goroutines: it must take concurrent writes.
			var out sandboxtest.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			v, err := Run(ctx, Config{TaskDir: taskDir, Agent: probe, HarnessDir: harness, Log: slog.New(slog.DiscardHandler), Stderr: &out})
			require.NoError(t, err)
			require.Contains(t, out.String(), "probed", "the agent ran")
			assert.True(t, strings.HasPrefix(out.String(), "1000\n"), "the agent is uid 1000: %s", out.String())
			assert.NotContains(t, out.String(), "LEAK")
			require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
			assert.Equal(t, 1.0, v.Reward["reward"])
		})
	}
}

// writeReadableTask writes a task whose files anyone may read, for a
// uid-1000 agent, with a test that passes and a solution that is a secret.
func writeReadableTask(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"task.toml": "schema_version = \"1.1\"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 60.0\nuser = \"1000:1000\"\n\n" +
			"[environment]\nworkdir = \"/tmp\"\nnetwork_mode = \"no-network\"\n",
		"instruction.md":     "Do nothing.\n",
		"tests/test.sh":      "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
		"solution/solve.sh":  "#!/bin/sh\necho the solution\n",
		"environment/README": "no image: a trial on this machine\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	}
}
