package collect

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/task"
)

// plant makes files under root as an agent would leave them: regular
// files, a directory, and what a collector must never read through.
func plant(t *testing.T, root string) (secret string) {
	t.Helper()
	secret = filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("the harness's own"), 0o600))
	for name, body := range map[string]string{
		"app/out.json":          `{"ok": true}`,
		"app/logs/run.log":      "line\n",
		"app/logs/deep/a.txt":   "a",
		"app/logs/scratch.tmp":  "excluded",
		"app/logs/deep/b.tmp":   "excluded too",
		"work/answer.txt":       "42\n",
		"elsewhere/private.txt": "not an artifact",
	} {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "app/logs/leak.log")))
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "app/link.json")))
	require.NoError(t, os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(root, "app/via")))
	require.NoError(t, unix.Mkfifo(filepath.Join(root, "app/logs/pipe"), 0o644))
	return secret
}

// Artifacts are copied beneath the sandbox's root, following no symlink
// (a link to a file of the harness's is reported, never read), skipping
// FIFOs without blocking, honouring exclude, and each is reported with
// where it went (docs/failures.md#artifacts-never-follow-the-agents-symlinks).
func TestArtifactsNeverFollowSymlinks(t *testing.T) {
	root := t.TempDir()
	plant(t, root)
	base := t.TempDir()
	res, err := Run(context.Background(), Config{
		Base: base, Root: root, Workdir: "/work",
		Artifacts: []task.Artifact{
			{Source: "/app/out.json"},
			{Source: "/app/logs", Destination: "logs", Exclude: []string{"*.tmp"}},
			{Source: "answer.txt", Destination: "answers/final.txt"},
			{Source: "/app/link.json"},
			{Source: "/app/via/private.txt"},
			{Source: "/app/none.json"},
		},
	})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(base, "1"), res.Dir)
	byDest := map[string]Artifact{}
	for _, a := range res.Artifacts {
		byDest[a.Destination] = a
	}
	for dest, want := range map[string]string{
		"app/out.json":        StatusCollected,
		"logs":                StatusPartial,
		"answers/final.txt":   StatusCollected,
		"app/link.json":       StatusFailed,
		"app/via/private.txt": StatusFailed,
		"app/none.json":       StatusMissing,
	} {
		assert.Equal(t, want, byDest[dest].Status, "%s: %+v", dest, byDest[dest])
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(res.Dir, rel))
		require.NoError(t, err, rel)
		return string(b)
	}
	assert.Equal(t, `{"ok": true}`, read("app/out.json"))
	assert.Equal(t, "line\n", read("logs/run.log"))
	assert.Equal(t, "a", read("logs/deep/a.txt"))
	assert.Equal(t, "42\n", read("answers/final.txt"), "a relative source is the workdir's")
	assert.Equal(t, 2, byDest["logs"].Files)
	assert.Contains(t, strings.Join(byDest["logs"].Skipped, "\n"), "leak.log: a symlink, not followed")
	assert.Contains(t, strings.Join(byDest["logs"].Skipped, "\n"), "pipe: not a regular file or a directory")
	assert.Contains(t, byDest["app/via/private.txt"].Error, "a symlink on the way, not followed")
	for _, p := range []string{"logs/scratch.tmp", "logs/deep/b.tmp", "logs/leak.log", "app/link.json", "app/via"} {
		_, err := os.Lstat(filepath.Join(res.Dir, p))
		assert.True(t, os.IsNotExist(err), "%s must not be collected", p)
	}
	filepath.Walk(res.Dir, func(p string, fi os.FileInfo, err error) error {
		require.NoError(t, err)
		assert.False(t, fi.Mode()&os.ModeSymlink != 0, "no symlink in the collection: %s", p)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			assert.NotContains(t, string(b), "the harness's own", p)
		}
		return nil
	})
	var manifest Result
	require.NoError(t, json.Unmarshal([]byte(read(ManifestName)), &manifest))
	assert.Equal(t, res.Artifacts, manifest.Artifacts)

	// A second grading collects into a directory of its own.
	res2, err := Run(context.Background(), Config{Base: base, Root: root, Artifacts: []task.Artifact{{Source: "/app/out.json"}}})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(base, "2"), res2.Dir)
}

// The collection stops at its bounds, whatever the agent left under a
// source, and says so.
func TestArtifactsAreBounded(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "big"), 0o755))
	for i := range 10 {
		require.NoError(t, os.WriteFile(filepath.Join(root, "big", strings.Repeat("f", i+1)), make([]byte, 1000), 0o644))
	}
	res, err := Run(context.Background(), Config{
		Base: t.TempDir(), Root: root, Limits: Limits{Bytes: 2500, Entries: 1000},
		Artifacts: []task.Artifact{{Source: "/big"}},
	})
	require.NoError(t, err)
	require.Len(t, res.Artifacts, 1)
	assert.Equal(t, StatusPartial, res.Artifacts[0].Status)
	assert.Equal(t, int64(2500), res.Artifacts[0].Bytes)
	assert.Contains(t, res.Message, "stopped at 2500 bytes")
}

// A directory of more entries than the budget holds is listed no further
// than the budget: the collection is partial and holds exactly the budget.
func TestArtifactsListNoMoreThanTheBudget(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "many"), 0o755))
	for i := range 3000 {
		require.NoError(t, os.WriteFile(filepath.Join(root, "many", fmt.Sprintf("f%05d", i)), nil, 0o644))
	}
	base := t.TempDir()
	res, err := Run(context.Background(), Config{
		Base: base, Root: root, Limits: Limits{Bytes: 1 << 20, Entries: 50},
		Artifacts: []task.Artifact{{Source: "/many"}},
	})
	require.NoError(t, err)
	require.Len(t, res.Artifacts, 1)
	assert.Equal(t, StatusPartial, res.Artifacts[0].Status)
	got, err := os.ReadDir(filepath.Join(res.Dir, res.Artifacts[0].Destination))
	require.NoError(t, err)
	assert.Less(t, len(got), 50, "no more than the budget's entries (the directory itself counts)")
	assert.NotEmpty(t, got)
}
