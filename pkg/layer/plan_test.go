package layer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/task"
)

func TestCheckPrefix(t *testing.T) {
	for _, ok := range []string{"sandboxd", "registry.example:5000/team/tasks", "localhost/x", "ghcr.io/org/tb2", "a_b/c-d.e"} {
		assert.NoError(t, CheckPrefix(ok), ok)
	}
	for _, bad := range []string{"", "Sandboxd", "sandboxd:latest", "team/", "a//b", "-x", "reg istry/x"} {
		assert.Error(t, CheckPrefix(bad), bad)
	}
}

func TestNames(t *testing.T) {
	assert.Equal(t, "terminal-bench-2", repoName("Terminal_Bench 2"))
	assert.Equal(t, "tasks", repoName("..."))
	assert.Equal(t, "hello-world", tagName("hello-world"))
	assert.Equal(t, "t.hidden", tagName(".hidden"))
	assert.Equal(t, "a-b", tagName("a b"))
	assert.Len(t, tagName(strings.Repeat("x", 200)), 128)
	assert.Equal(t, "x/y:latest", withTag("x/y"))
	assert.Equal(t, "reg:5000/y:latest", withTag("reg:5000/y"))
	assert.Equal(t, "x/y:t", withTag("x/y:t"))
}

func TestEnvHash_Stable(t *testing.T) {
	a := writeTask(t, filepath.Join(t.TempDir(), "ds", "a"), taskFiles("debian:bookworm"))
	b := writeTask(t, filepath.Join(t.TempDir(), "other", "b"), with(taskFiles("debian:bookworm"), map[string]string{
		// What serve reads per task does not split a group.
		"task.toml":      "schema_version = \"1.1\"\n[agent]\ntimeout_sec = 5.0\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 512\nnetwork_mode = \"no-network\"\n[environment.env]\nX = \"1\"\n",
		"instruction.md": "Something else entirely.\n",
		"tests/test.sh":  "#!/bin/bash\nexit 1\n",
	}))
	// Times are not content: a fresh checkout has other mtimes.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(b, "environment", "Dockerfile"), old, old))

	ha, hb := hashOf(t, a), hashOf(t, b)
	assert.Equal(t, ha, hb, "same environment/ and resources, different tasks")
	assert.Len(t, ha, 64)
	assert.Equal(t, ha, hashOf(t, a), "the same task hashes the same twice")

	changes := map[string]func(dir string){
		"a byte of the Dockerfile": func(d string) {
			writeTask(t, d, map[string]string{"environment/Dockerfile": "FROM debian:bookworm\nWORKDIR /app2\n"})
		},
		"a new file in environment/": func(d string) { writeTask(t, d, map[string]string{"environment/extra.txt": "x"}) },
		"a file's x bit": func(d string) {
			writeTask(t, d, map[string]string{"environment/run.sh": "echo\n"})
			require.NoError(t, os.Chmod(filepath.Join(d, "environment", "run.sh"), 0o644))
		},
		"a symlink's target": func(d string) {
			require.NoError(t, os.Symlink("Dockerfile", filepath.Join(d, "environment", "link")))
		},
		"the memory": func(d string) {
			writeTask(t, d, map[string]string{"task.toml": "schema_version = \"1.1\"\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 1024\n"})
		},
		"docker_image": func(d string) {
			writeTask(t, d, map[string]string{"task.toml": "schema_version = \"1.1\"\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 512\ndocker_image = \"x:1\"\n"})
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			d := writeTask(t, filepath.Join(t.TempDir(), "ds", "c"), taskFiles("debian:bookworm"))
			if name == "a file's x bit" {
				writeTask(t, d, map[string]string{"environment/run.sh": "echo\n"}) // 0755 by writeTask
				before := hashOf(t, d)
				change(d)
				assert.NotEqual(t, before, hashOf(t, d))
				return
			}
			change(d)
			assert.NotEqual(t, ha, hashOf(t, d))
		})
	}
}

func hashOf(t *testing.T, dir string) string {
	t.Helper()
	tk, err := task.Load(dir)
	require.NoError(t, err)
	h, err := EnvHash(tk)
	require.NoError(t, err)
	return h
}

func TestMakePlan_Groups(t *testing.T) {
	root := filepath.Join(t.TempDir(), "TB 2")
	same1 := writeTask(t, filepath.Join(root, "hello"), taskFiles("debian:bookworm"))
	same2 := writeTask(t, filepath.Join(root, "bye"), taskFiles("debian:bookworm"))
	other := writeTask(t, filepath.Join(root, "server"), with(taskFiles("debian:bookworm"), map[string]string{
		"environment/Dockerfile": "FROM debian:bookworm\nRUN apt-get install -y python3\n"}))
	img := writeTask(t, filepath.Join(root, "prebuilt"), with(taskFiles(""), map[string]string{
		"environment/Dockerfile": "",
		"task.toml":              "schema_version = \"1.1\"\n[environment]\ndocker_image = \"ghcr.io/x/y:1\"\nbuild_timeout_sec = 900.0\n",
	}))

	p := MakePlan([]string{same1, other, same2, img, same1 + "/"}, "reg.example/sb")
	require.Empty(t, p.Failures)
	require.Len(t, p.Groups, 3, "hello and bye share one image")
	var shared *Group
	for _, g := range p.Groups {
		assert.Equal(t, "tb-2", g.Dataset, "the parent directory, as a repository name")
		assert.True(t, strings.HasPrefix(g.Name, "tb-2-") && len(g.Name) == len("tb-2-")+12, g.Name)
		assert.Equal(t, "reg.example/sb/"+g.Name+":latest", g.Image)
		if len(g.Tasks) == 2 {
			shared = g
		}
	}
	require.NotNil(t, shared)
	assert.Equal(t, []string{"bye", "hello"}, shared.TaskNames(), "sorted by name")
	assert.Equal(t, "reg.example/sb/tb-2:bye", shared.Tasks[0].Image)
	assert.Equal(t, "environment/Dockerfile", shared.Base.From)
	assert.Equal(t, filepath.Join(same1, "environment"), filepath.Join(filepath.Dir(shared.Base.Context), "environment"))
	assert.Equal(t, 300*time.Second, shared.Base.Timeout)

	for _, g := range p.Groups {
		if g.TaskNames()[0] == "prebuilt" {
			assert.Equal(t, "ghcr.io/x/y:1", g.Base.Image)
			assert.Equal(t, "docker_image ghcr.io/x/y:1", g.Base.From)
			assert.Equal(t, 900*time.Second, g.Base.Timeout)
		}
	}
}

func TestMakePlan_LongestBuildTimeoutWins(t *testing.T) {
	root := t.TempDir()
	a := writeTask(t, filepath.Join(root, "a"), taskFiles("debian:bookworm"))
	b := writeTask(t, filepath.Join(root, "b"), with(taskFiles("debian:bookworm"), map[string]string{
		"task.toml": "schema_version = \"1.1\"\n[environment]\nbuild_timeout_sec = 1200.0\ncpus = 1\nmemory_mb = 512\n"}))
	p := MakePlan([]string{a, b}, "x")
	require.Len(t, p.Groups, 1)
	assert.Equal(t, 1200*time.Second, p.Groups[0].Base.Timeout)
}

// A batch with bad tasks plans the good ones and names each bad one with
// its reason.
func TestMakePlan_BadTasks(t *testing.T) {
	fixtures := filepath.Join("..", "..", "testdata", "task-files")
	root := t.TempDir()
	good := writeTask(t, filepath.Join(root, "good"), taskFiles("debian:bookworm"))
	noEnv := writeTask(t, filepath.Join(root, "no-env"), with(taskFiles(""), map[string]string{"environment/Dockerfile": ""}))
	badCompose := writeTask(t, filepath.Join(root, "bad-compose"), with(taskFiles("debian:bookworm"), map[string]string{
		"environment/docker-compose.yaml": "services:\n  main: {}\n  db:\n    image: postgres:16\n"}))
	p := MakePlan([]string{
		good,
		filepath.Join(fixtures, "type-error"),
		filepath.Join(fixtures, "windows"),
		filepath.Join(fixtures, "multi-step-dir"),
		noEnv,
		badCompose,
		filepath.Join(root, "missing"),
	}, "x")
	require.Len(t, p.Groups, 1)
	assert.Equal(t, []string{"good"}, p.Groups[0].TaskNames())
	msgs := map[string]string{}
	for _, f := range p.Failures {
		msgs[f.Name] = f.Err.Error()
	}
	require.Len(t, msgs, 6, "%v", msgs)
	assert.Contains(t, msgs["type-error"], "type-error/task.toml:5: environment.memory_mb", "file:line of the bad value")
	assert.Contains(t, msgs["windows"], "sandboxd does not support Windows containers")
	assert.True(t, errors.Is(failureErr(p, "windows"), task.ErrUnsupported))
	assert.Contains(t, msgs["multi-step-dir"], "multi-step tasks")
	assert.Contains(t, msgs["no-env"], "no environment/Dockerfile and no docker_image")
	assert.True(t, errors.Is(failureErr(p, "no-env"), ErrNoEnvironment))
	assert.Contains(t, msgs["bad-compose"], "docker-compose.yaml:3: services.db: declares no TCP port")
	assert.Contains(t, msgs["missing"], "missing/task.toml: missing")
}

func failureErr(p *Plan, name string) error {
	for _, f := range p.Failures {
		if f.Name == name {
			return f.Err
		}
	}
	return nil
}

func TestMakePlan_SameNameTwice(t *testing.T) {
	a := writeTask(t, filepath.Join(t.TempDir(), "ds", "hello"), taskFiles("debian:bookworm"))
	b := writeTask(t, filepath.Join(t.TempDir(), "ds", "hello"), taskFiles("debian:bookworm"))
	p := MakePlan([]string{a, b}, "x")
	require.Len(t, p.Failures, 1)
	assert.Contains(t, p.Failures[0].Err.Error(), "its image x/ds:hello is already the name of "+a)
}

func TestMakePlan_DockerImageWinsOverDockerfile(t *testing.T) {
	d := writeTask(t, filepath.Join(t.TempDir(), "ds", "both"), with(taskFiles("debian:bookworm"), map[string]string{
		"task.toml": "schema_version = \"1.1\"\n[environment]\ndocker_image = \"prebuilt:1\"\n"}))
	p := MakePlan([]string{d}, "x")
	require.Len(t, p.Groups, 1)
	assert.Equal(t, "prebuilt:1", p.Groups[0].Base.Image)
	require.Len(t, p.Groups[0].Tasks[0].Warnings, 1)
	assert.Contains(t, p.Groups[0].Tasks[0].Warnings[0], "not built: docker_image is set")
}

func TestExpandDirs(t *testing.T) {
	root := t.TempDir()
	ds := filepath.Join(root, "dataset")
	writeTask(t, filepath.Join(ds, "a"), taskFiles("x"))
	writeTask(t, filepath.Join(ds, "b"), taskFiles("x"))
	require.NoError(t, os.MkdirAll(filepath.Join(ds, "notes"), 0o755))
	single := writeTask(t, filepath.Join(root, "single"), taskFiles("x"))
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))
	assert.Equal(t, []string{filepath.Join(ds, "a"), filepath.Join(ds, "b"), single, empty},
		ExpandDirs([]string{ds, single, empty}), "a dataset becomes its tasks; a task or a non-task stays")
}

// A compose file is read as Compose reads it under Harbor: main naming
// ${MAIN_IMAGE_NAME} is the task's own environment/Dockerfile, and tasks whose
// [environment].env make one compose file two projects do not share an image.
func TestMakePlan_ComposeInterpolation(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ds")
	composeFile := "services:\n  main:\n    image: ${MAIN_IMAGE_NAME}\n  cache:\n    image: redis:${REDIS_TAG:-7}\n    expose: [\"${CACHE_PORT}\"]\n"
	taskTOML := func(env string) string {
		return "schema_version = \"1.1\"\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 512\n" + env
	}
	files := func(env string) map[string]string {
		return with(taskFiles("debian:bookworm"), map[string]string{
			"task.toml": taskTOML(env), "environment/docker-compose.yaml": composeFile, "environment/.env": "CACHE_PORT=6379\n",
		})
	}
	writeTask(t, filepath.Join(root, "a"), files(""))
	writeTask(t, filepath.Join(root, "b"), files("[environment.env]\nUNRELATED = \"1\"\n"))
	writeTask(t, filepath.Join(root, "c"), files("[environment.env]\nREDIS_TAG = \"6\"\n"))
	p := MakePlan(ExpandDirs([]string{root}), "sb")
	require.Empty(t, p.Failures)
	require.Len(t, p.Groups, 2, "c's REDIS_TAG makes another sidecar")
	byTask := map[string]*Group{}
	for _, g := range p.Groups {
		for _, n := range g.TaskNames() {
			byTask[n] = g
		}
	}
	assert.Same(t, byTask["a"], byTask["b"], "a variable the file does not use splits nothing")
	assert.NotSame(t, byTask["a"], byTask["c"])
	assert.NotEqual(t, byTask["a"].Name, byTask["c"].Name, "two groups, two names")
	assert.Equal(t, "redis:7", byTask["a"].Sidecars[0].Image)
	assert.Equal(t, "redis:6", byTask["c"].Sidecars[0].Image)
	assert.Equal(t, 6379, byTask["a"].Sidecars[0].Port, "from environment/.env")
	assert.Equal(t, task.PathDockerfile, byTask["a"].Base.From, "${MAIN_IMAGE_NAME} is built from environment/Dockerfile, not pulled")
}
