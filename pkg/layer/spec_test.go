package layer

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/layer/archive"
	"github.com/sandboxd/sandboxd/pkg/layer/engine"
)

func planOne(t *testing.T, files map[string]string) *Group {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ds")
	writeTask(t, filepath.Join(root, "alpha"), files)
	writeTask(t, filepath.Join(root, "beta"), with(files, map[string]string{"tests/data/input.txt": "42\n"}))
	p := MakePlan([]string{filepath.Join(root, "alpha"), filepath.Join(root, "beta")}, "sb")
	require.Empty(t, p.Failures)
	require.Len(t, p.Groups, 1)
	return p.Groups[0]
}

func servingLayerOf(t *testing.T, g *Group) *Layer {
	t.Helper()
	tomls := map[string][]byte{}
	for _, it := range g.Tasks {
		b, err := SandboxdTOML(it.Task, facts, nil, nil, "authorized_keys")
		require.NoError(t, err)
		tomls[it.Task.Name] = b
	}
	l, err := ServingLayer(g, stubBinary(t, false), "v9", tomls)
	require.NoError(t, err)
	return l
}

func TestServingLayer_Files(t *testing.T) {
	g := planOne(t, taskFiles("debian:bookworm"))
	l := servingLayerOf(t, g)
	got := map[string]fs.FileMode{}
	for _, f := range l.Files {
		got[f.Path] = f.Mode
	}
	want := map[string]fs.FileMode{
		"/media":                                          fs.ModeDir | 0o755,
		"/media/sandboxd":                                 fs.ModeDir | 0o755,
		"/media/sandboxd/bin":                             fs.ModeDir | 0o755,
		"/media/sandboxd/bin/sandboxd":                    0o755,
		"/media/sandboxd/tasks":                           fs.ModeDir | 0o755,
		"/media/sandboxd/tasks/alpha":                     fs.ModeDir | 0o755,
		"/media/sandboxd/tasks/alpha/task.toml":           0o644,
		"/media/sandboxd/tasks/alpha/instruction.md":      0o644,
		"/media/sandboxd/tasks/alpha/sandboxd.toml":       0o644,
		"/media/sandboxd/tasks/alpha/tests":               fs.ModeDir | 0o755,
		"/media/sandboxd/tasks/alpha/tests/test.sh":       0o755,
		"/media/sandboxd/tasks/beta":                      fs.ModeDir | 0o755,
		"/media/sandboxd/tasks/beta/task.toml":            0o644,
		"/media/sandboxd/tasks/beta/instruction.md":       0o644,
		"/media/sandboxd/tasks/beta/sandboxd.toml":        0o644,
		"/media/sandboxd/tasks/beta/tests":                fs.ModeDir | 0o755,
		"/media/sandboxd/tasks/beta/tests/test.sh":        0o755,
		"/media/sandboxd/tasks/beta/tests/data":           fs.ModeDir | 0o755,
		"/media/sandboxd/tasks/beta/tests/data/input.txt": 0o644,
	}
	assert.Equal(t, want, got, "the binary and each task's files; no solution/, no environment/")
	for i := 1; i < len(l.Files); i++ {
		assert.Less(t, l.Files[i-1].Path, l.Files[i].Path, "sorted, so that a directory precedes what it holds")
	}
}

func TestServingLayer_Settings(t *testing.T) {
	g := planOne(t, taskFiles("debian:bookworm"))
	s := servingLayerOf(t, g).Settings
	assert.Equal(t, "root", s.User)
	assert.Equal(t, []string{"/media/sandboxd/bin/sandboxd", "serve"}, s.Entrypoint)
	assert.Equal(t, []string{}, s.Cmd, "CMD [] clears the base's")
	assert.Equal(t, []string{"CMD", "/media/sandboxd/bin/sandboxd", "status", "--ready"}, s.Healthcheck)
	assert.Equal(t, "SIGTERM", s.StopSignal)
	assert.Equal(t, []string{"2222/tcp"}, s.Expose)
	assert.Equal(t, "v9", s.Labels[LabelVersion])
	assert.Equal(t, "alpha,beta", s.Labels[LabelTasks])
	assert.Equal(t, g.Name, s.Labels[LabelGroup])
}

// The two renderings of the same settings, Dockerfile instructions and a
// config JSON, must describe the same image.
func TestSettings_InstructionsAndApplyAgree(t *testing.T) {
	g := planOne(t, taskFiles("debian:bookworm"))
	s := servingLayerOf(t, g).Settings
	df := strings.Join(s.Instructions(), "\n")
	assert.Contains(t, df, "USER root\n")
	assert.Contains(t, df, `ENTRYPOINT ["/media/sandboxd/bin/sandboxd","serve"]`)
	assert.Contains(t, df, "CMD []\n")
	assert.Contains(t, df, `HEALTHCHECK --interval=5s --timeout=10s --retries=3 CMD ["/media/sandboxd/bin/sandboxd","status","--ready"]`)
	assert.Contains(t, df, "STOPSIGNAL SIGTERM\n")
	assert.Contains(t, df, "EXPOSE 2222/tcp\n")
	assert.Contains(t, df, `"org.sandboxd.tasks"="alpha,beta"`)

	base := map[string]any{"User": "app", "Env": []any{"PATH=/bin", "LANG=C"}, "Cmd": []any{"python3"},
		"Entrypoint": []any{"/entry.sh"}, "Labels": map[string]any{"keep": "me"}, "WorkingDir": "/app",
		"Healthcheck": map[string]any{"Test": []any{"CMD", "curl", "localhost"}}, "ExposedPorts": map[string]any{"80/tcp": map[string]any{}}}
	cfg := s.Apply(base)
	assert.Equal(t, "root", cfg["User"])
	assert.Equal(t, []string{"/media/sandboxd/bin/sandboxd", "serve"}, cfg["Entrypoint"])
	assert.Equal(t, []string{}, cfg["Cmd"])
	assert.Equal(t, "/app", cfg["WorkingDir"], "WORKDIR stays the base's")
	assert.Equal(t, []any{"PATH=/bin", "LANG=C"}, cfg["Env"], "ENV stays the base's")
	assert.Equal(t, []string{"CMD", "/media/sandboxd/bin/sandboxd", "status", "--ready"}, cfg["Healthcheck"].(map[string]any)["Test"])
	assert.Equal(t, int64(5e9), cfg["Healthcheck"].(map[string]any)["Interval"])
	assert.Equal(t, "SIGTERM", cfg["StopSignal"])
	assert.Contains(t, cfg["ExposedPorts"], "80/tcp")
	assert.Contains(t, cfg["ExposedPorts"], "2222/tcp")
	labels := cfg["Labels"].(map[string]any)
	assert.Equal(t, "me", labels["keep"])
	assert.Equal(t, "alpha,beta", labels[LabelTasks])
	assert.Equal(t, "app", base["User"], "the base's config is not changed")

	ts := TaskSettings(g.Tasks[0], g.Name)
	tcfg := ts.Apply(cfg)
	assert.Equal(t, []string{"--task", "alpha"}, tcfg["Cmd"])
	assert.Equal(t, []string{"PATH=/bin", "LANG=C", "SANDBOXD_TASK=alpha"}, tcfg["Env"], "the name survives Harbor's command override")
	assert.Equal(t, cfg["Entrypoint"], tcfg["Entrypoint"])
	tdf := strings.Join(ts.Instructions(), "\n")
	assert.Contains(t, tdf, `ENV SANDBOXD_TASK="alpha"`)
	assert.Contains(t, tdf, `CMD ["--task","alpha"]`)
}

func TestLayer_WriteTarIsDeterministic(t *testing.T) {
	g := planOne(t, taskFiles("debian:bookworm"))
	l := servingLayerOf(t, g)
	var a, b bytes.Buffer
	da, err := l.WriteTar(&a)
	require.NoError(t, err)
	// A checkout elsewhere has other mtimes; the layer must not notice.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(g.Tasks[0].Dir, "tests", "test.sh"), old, old))
	db, err := l.WriteTar(&b)
	require.NoError(t, err)
	assert.Equal(t, da, db)
	assert.True(t, strings.HasPrefix(da, "sha256:"))

	tr := tar.NewReader(&a)
	entries := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		entries[h.Name] = h
	}
	sh := entries["media/sandboxd/tasks/alpha/tests/test.sh"]
	require.NotNil(t, sh)
	assert.Equal(t, int64(0o755), sh.Mode)
	assert.Equal(t, 0, sh.Uid, "owned by root in the image")
	assert.Equal(t, archive.ModTime, sh.ModTime.UTC())
	assert.Equal(t, byte(tar.TypeDir), entries["media/sandboxd/"].Typeflag)
}

func TestLayer_WriteContextKeepsModes(t *testing.T) {
	g := planOne(t, taskFiles("debian:bookworm"))
	l := servingLayerOf(t, g)
	dir := t.TempDir()
	require.NoError(t, l.WriteContext(dir))
	st, err := os.Stat(filepath.Join(dir, "rootfs", "media", "sandboxd", "tasks", "alpha", "tests", "test.sh"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), st.Mode().Perm())
	b, err := os.ReadFile(filepath.Join(dir, "rootfs", "media", "sandboxd", "tasks", "beta", "sandboxd.toml"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `image_user = "app"`)
}

func TestServingLayer_RefusesSymlinkInTests(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ds")
	d := writeTask(t, filepath.Join(root, "a"), taskFiles("x"))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(d, "tests", "passwd")))
	p := MakePlan([]string{d}, "sb")
	require.Len(t, p.Groups, 1)
	_, err := ServingLayer(p.Groups[0], stubBinary(t, false), "v", map[string][]byte{})
	assert.ErrorContains(t, err, "tests/ may hold only files and directories")
}

func TestDeriveConfigAndArchive(t *testing.T) {
	g := planOne(t, taskFiles("debian:bookworm"))
	l := servingLayerOf(t, g)
	layerPath := filepath.Join(t.TempDir(), "layer.tar")
	f, err := os.Create(layerPath)
	require.NoError(t, err)
	diff, err := l.WriteTar(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	base := &engine.Image{ID: "sha256:base", Architecture: "amd64", OS: "linux", Created: "2026-01-02T03:04:05Z",
		RawConfig: map[string]any{"User": "app", "Entrypoint": []any{"/e"}}, Layers: []string{"sha256:l1", "sha256:l2"}}
	lower := &engine.Image{ID: "sha256:tools", Layers: []string{"sha256:l1", "sha256:l2", "sha256:l3"}}
	hist := archive.RebuildHistory([]engine.HistoryEntry{{CreatedBy: "RUN tools", Size: 300}, {CreatedBy: "/bin/sh -c #(nop) USER root"}, {CreatedBy: "RUN b", Size: 1}, {CreatedBy: "import", Size: 9}}, 3)
	gc := archive.Derive(base, lower, hist, diff, l.Settings.Apply(base.RawConfig), "sandboxd adapt")
	assert.Equal(t, []string{"sha256:l1", "sha256:l2", "sha256:l3", diff}, gc.RootFS.DiffIDs, "the tools layer, then ours")
	assert.Equal(t, base.Created, gc.Created, "same inputs, same image ID")
	assert.Equal(t, "root", gc.Config["User"])
	require.Len(t, gc.History, 5)
	assert.Equal(t, "sandboxd adapt", gc.History[4].CreatedBy)
	assert.False(t, gc.History[4].EmptyLayer)

	gd, err := archive.NewImage("sb/g:latest", gc)
	require.NoError(t, err)
	tc := gc
	tc.Config = TaskSettings(g.Tasks[0], g.Name).Apply(gc.Config)
	td, err := archive.NewImage("sb/ds:alpha", tc)
	require.NoError(t, err)
	assert.NotEqual(t, gd.ID, td.ID)
	assert.Equal(t, gd.Layers, td.Layers, "a task image is config only")

	archivePath := filepath.Join(t.TempDir(), "images.tar")
	af, err := os.Create(archivePath)
	require.NoError(t, err)
	require.NoError(t, archive.Write(af, []archive.Image{gd, td}, layerPath, diff))
	require.NoError(t, af.Close())
	files, err := readTar(archivePath)
	require.NoError(t, err)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	require.NoError(t, json.Unmarshal(files["manifest.json"], &manifest))
	require.Len(t, manifest, 2)
	assert.Equal(t, []string{"sb/g:latest"}, manifest[0].RepoTags)
	assert.Equal(t, strings.TrimPrefix(gd.ID, "sha256:")+".json", manifest[0].Config, "the config's name is its sha256, the image ID")
	assert.Len(t, manifest[0].Layers, 4)
	var layerFiles []string
	for name := range files {
		if strings.HasSuffix(name, "/layer.tar") {
			layerFiles = append(layerFiles, name)
		}
	}
	assert.Equal(t, []string{strings.TrimPrefix(diff, "sha256:") + "/layer.tar"}, layerFiles, "only the serving layer travels")
}
