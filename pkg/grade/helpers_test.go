package grade_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// world is a sandbox built as serve builds it (harness dir hidden,
// /logs/verifier masked) with a logs dir of its own.
type world struct {
	sb      *sandboxtest.Sandbox
	harness string
	logs    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	sandboxtest.RequireRoot(t)
	harness := sandboxtest.HarnessDir(t)
	sb := sandboxtest.Start(t, bwrap.Config{Hide: []string{harness}, Mask: []string{"/logs/verifier"}})
	return &world{sb: sb, harness: harness, logs: t.TempDir()}
}

// tests writes a tests directory into the harness, as the baked copy of a
// task's tests/ is; test.sh is executable unless the files say otherwise.
func (w *world) tests(t *testing.T, testSh string, extra map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp(w.harness, "tests-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test.sh"), []byte(testSh), 0o755))
	for name, content := range extra {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// config is a root verifier with a plain environment, in a fresh workdir.
func (w *world) config(t *testing.T, tests string) grade.Config {
	t.Helper()
	u, err := idmap.Lookup("/", "0")
	require.NoError(t, err)
	return grade.Config{
		Target:     w.sb.Target,
		HarnessDir: w.harness,
		Tests:      tests,
		User:       u,
		Env:        []string{"PATH=" + childproc.DefaultPath, "HOME=" + u.Home},
		Workdir:    t.TempDir(),
		Timeout:    60 * time.Second,
		LogsDir:    w.logs,
		Log:        slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (w *world) grade(t *testing.T, cfg grade.Config) grade.Verdict {
	t.Helper()
	v, err := grade.Run(context.Background(), cfg)
	require.NoError(t, err, "verdict: %+v", v)
	return v
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// testsLeftAsFound checks that grading made no /tests in the shared
// filesystem: the verifier's exists only in its own view.
func testsLeftAsFound(t *testing.T) {
	t.Helper()
	sandboxtest.SharedTests(t)
	_, err := os.Lstat("/tests")
	existed := err == nil
	t.Cleanup(func() {
		if existed {
			return
		}
		if _, err := os.Lstat("/tests"); err == nil {
			t.Errorf("grading left /tests behind in the shared filesystem")
		}
	})
}
