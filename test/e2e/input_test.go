//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFiles writes a task (or any tree) from path → content.
func writeFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(p, []byte(content), mode))
	}
	return dir
}

// smallTask is a valid task over the given environment/Dockerfile (or
// task.toml lines), for the cases below.
func smallTask(dockerfile, environment string) map[string]string {
	files := map[string]string{
		"task.toml":         "schema_version = \"1.1\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 120.0\nworkdir = \"/srv\"\n" + environment,
		"instruction.md":    "Write hello to /srv/out.txt.\n",
		"tests/test.sh":     "#!/bin/bash\nif [ \"$(cat /srv/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "#!/bin/bash\necho hello > /srv/out.txt\n",
	}
	if dockerfile != "" {
		files["environment/Dockerfile"] = dockerfile
	}
	return files
}

// badInput: one adapt run over a batch in which every task but one is bad
// in its own way. The good one is adapted; each bad one is reported with one
// clear message; the exit status is non-zero. Then the engine goes missing.
func (e *env) badInput(t *testing.T) {
	root := filepath.Join(e.work, "e2e-bad")
	dir := func(name string, files map[string]string) string {
		return writeFiles(t, filepath.Join(root, name), files)
	}
	good := dir("good", smallTask("FROM sandboxd-base:bookworm\nWORKDIR /srv\n", ""))
	cases := map[string][]string{
		dir("invalid-toml", with(smallTask("FROM sandboxd-base:bookworm\n", ""), "task.toml",
			"schema_version = \"1.1\"\n\n[environment]\ncpus = \"two\"\n")): {"invalid-toml/task.toml:4: environment.cpus: must be a number"},
		dir("failing-build", smallTask("FROM sandboxd-base:bookworm\nRUN echo about to fail && exit 3\n", "")): {
			"build of environment/Dockerfile of failing-build failed", "its last", "about to fail", "returned a non-zero code: 3"},
		dir("slow-build", with(smallTask("FROM sandboxd-base:bookworm\nRUN sleep 120\n", ""), "task.toml",
			"schema_version = \"1.1\"\n[environment]\nbuild_timeout_sec = 3.0\n")): {"exceeded build_timeout_sec (3s)"},
		dir("windows", with(smallTask("FROM sandboxd-base:bookworm\n", ""), "task.toml",
			"schema_version = \"1.3\"\n\n[environment]\nos = \"windows\"\n")): {"windows/task.toml:4: environment.os: sandboxd does not support Windows containers"},
		dir("unsupported-field", with(smallTask("FROM sandboxd-base:bookworm\n", ""), "task.toml",
			"schema_version = \"1.3\"\n[verifier]\nenvironment_mode = \"separate\"\n")): {"unsupported-field/task.toml:3: verifier.environment_mode: sandboxd does not support a separate verifier environment"},
		dir("no-tools-no-package-manager", smallTask("FROM sandboxd-base:bookworm\nRUN rm /usr/bin/apt-get\n", "")): {
			"the image lacks bwrap and has no package manager (apt-get, apk, dnf, microdnf, yum) to install bubblewrap"},
		dir("no-shell", with(smallTask("FROM scratch\nCOPY hello.txt /hello.txt\n", ""), "environment/hello.txt", "hi\n")): {"it has no /bin/sh"},
	}
	args := []string{"--tag", prefix + "-bad", good}
	for d := range cases {
		args = append(args, d)
	}
	m, stderr, code := e.adapt(t, nil, args...)
	assert.Equal(t, 1, code, "a batch with bad tasks fails as a whole")
	require.Len(t, m.Tasks, 1, "the good task is adapted: %s", tail(stderr, 40))
	assert.Equal(t, "good", m.Tasks[0].Name)
	docker(t, "image", "inspect", m.Tasks[0].Image)
	got := map[string]string{}
	for _, er := range m.Errors {
		got[er.Dir] = er.Error
	}
	for d, wants := range cases {
		msg, ok := got[d]
		if !assert.True(t, ok, "%s is not reported", filepath.Base(d)) {
			continue
		}
		for _, w := range wants {
			assert.Contains(t, msg, w, "%s", filepath.Base(d))
		}
		assert.Contains(t, stderr, "sandboxd: adapt: "+d+": ", "each bad task is named on stderr")
	}
	assert.Len(t, m.Errors, len(cases))

	t.Run("no engine", func(t *testing.T) {
		m, stderr, code := e.adapt(t, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, "--tag", prefix+"-bad", good)
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "no container engine: the engine does not answer")
		assert.Contains(t, stderr, "--out DIR")
		require.Len(t, m.Errors, 1)
		assert.Empty(t, m.Tasks)
	})
}

func with(m map[string]string, k, v string) map[string]string {
	m[k] = v
	return m
}

// outRoute adapts one task both ways — loaded as an archive, and as the
// build contexts of --out built by their build.sh — and checks that the two
// images have the same config and the same files under the harness dir, and
// that the built one serves.
func (e *env) outRoute(t *testing.T) {
	src := writeFiles(t, filepath.Join(e.work, "e2e-out", "facts"), smallTask(
		"FROM sandboxd-base:bookworm-tools\nWORKDIR /srv\nENV GREETING=hello\nUSER 1000:1000\nENTRYPOINT [\"/bin/sh\", \"-c\", \"echo started > /tmp/entrypoint.txt\"]\n", ""))
	a, stderr, code := e.adapt(t, nil, "--tag", prefix+"-load", src)
	require.Equal(t, 0, code, "%s", tail(stderr, 40))
	require.Equal(t, "load", a.Groups[0].Assembly)

	out := filepath.Join(e.work, "out")
	b, stderr, code := e.adapt(t, nil, "--tag", prefix+"-out", "--out", out, src)
	require.Equal(t, 0, code, "%s", tail(stderr, 40))
	t.Cleanup(func() {
		dockerErr(context.Background(), "rmi", "-f", strings.TrimSuffix(b.Groups[0].Image, ":latest")+":base")
	})
	cmd := exec.Command("sh", filepath.Join(out, "build.sh"))
	buildOut, err := cmd.CombinedOutput()
	require.NoError(t, err, "build.sh:\n%s", tail(string(buildOut), 40))

	for _, pair := range [][2]string{{a.Groups[0].Image, b.Groups[0].Image}, {a.Tasks[0].Image, b.Tasks[0].Image}} {
		ca, cb := imageConfig(t, pair[0]), imageConfig(t, pair[1])
		assert.Equal(t, ca, cb, "config of %s and %s", pair[0], pair[1])
		assert.Equal(t, harnessFiles(t, pair[0]), harnessFiles(t, pair[1]), "files of %s and %s", pair[0], pair[1])
	}
	facts := harnessFiles(t, a.Tasks[0].Image)
	assert.Contains(t, facts, `entrypoint = ["/bin/sh", "-c", "echo started > /tmp/entrypoint.txt"]`)
	assert.Contains(t, facts, `image_user = "1000:1000"`)
	assert.Contains(t, facts, `image_workdir = "/srv"`)
	assert.Contains(t, facts, `"GREETING=hello"`)

	c := e.runContainer(t, b.Tasks[0].Image, securityFlags(e.repo))
	out2, err := e.sshRun(context.Background(), c.IP, "id -u; cat /tmp/entrypoint.txt", "")
	require.NoError(t, err, out2)
	assert.Equal(t, "1000\nstarted\n", out2, "sessions run as the base's USER, and its ENTRYPOINT ran in the sandbox")
}

// imageConfig is the part of an image's config adapt sets or keeps.
func imageConfig(t *testing.T, ref string) map[string]any {
	t.Helper()
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(docker(t, "image", "inspect", "--format", "{{json .Config}}", ref)), &cfg))
	keep := map[string]any{}
	for _, k := range []string{"User", "Env", "Entrypoint", "Cmd", "WorkingDir", "Labels", "Healthcheck", "StopSignal", "ExposedPorts", "Volumes"} {
		keep[k] = cfg[k]
	}
	return keep
}

// harnessFiles lists the harness dir of an image (path, mode, size) and the
// tasks' sandboxd.toml.
func harnessFiles(t *testing.T, ref string) string {
	t.Helper()
	return docker(t, "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", ref, "-c",
		"cd /media/sandboxd && find . -exec stat -c '%n %a %u:%g %s' {} + | sort && cat tasks/*/sandboxd.toml")
}

// cachedBase measures adapt over a base that is already built and already
// has bubblewrap and util-linux (the figure the issue asks for), with two
// tasks that share the image, and checks which task each image serves.
func (e *env) cachedBase(t *testing.T) {
	root := filepath.Join(e.work, "e2e-bench")
	a := writeFiles(t, filepath.Join(root, "first"), smallTask("", "docker_image = \"sandboxd-base:bookworm-tools\"\n"))
	b := writeFiles(t, filepath.Join(root, "second"), smallTask("", "docker_image = \"sandboxd-base:bookworm-tools\"\n"))
	// The serving layer's own cost: Harbor's agent tools are measured by
	// TestHarborTools (harbortools_test.go).
	bench := []string{"--tag", prefix + "-bench", "--no-harbor-tools", a, b}
	m, stderr, code := e.adapt(t, nil, bench...)
	require.Equal(t, 0, code, "%s", tail(stderr, 40))
	require.Len(t, m.Groups, 1, "one environment, one image")
	var best time.Duration
	var added float64
	for i := 0; i < 3; i++ {
		start := time.Now()
		m, stderr, code := e.adapt(t, nil, bench...)
		d := time.Since(start)
		require.Equal(t, 0, code, "%s", tail(stderr, 40))
		assert.Empty(t, m.Groups[0].Installed, "bwrap and util-linux were there")
		if best == 0 || d < best {
			best = d
		}
		added = float64(m.Groups[0].LayerBytes) / 1e6
	}
	st, err := os.Stat(e.bin)
	require.NoError(t, err)
	figure("adapt over a cached base with bwrap and util-linux: %.2fs for one group of two tasks (best of 3, the whole command)", best.Seconds())
	figure("serving layer over that base: %.2f MB (the sandboxd binary alone: %.2f MB)", added, float64(st.Size())/1e6)
	assert.Less(t, added, 20.0, "the serving layer stays under 20 MB where the tools are present")

	served := func(c *container) string {
		var st struct{ Task string }
		require.NoError(t, json.Unmarshal([]byte(docker(t, "exec", c.ID, "/media/sandboxd/bin/sandboxd", "status")), &st))
		return st.Task
	}
	group := m.Groups[0].Image
	t.Run("task image under Harbor's command", func(t *testing.T) {
		assert.Equal(t, "second", served(e.runContainer(t, m.Tasks[1].Image, securityFlags(e.repo))))
	})
	t.Run("group image with SANDBOXD_TASK", func(t *testing.T) {
		assert.Equal(t, "first", served(e.runContainer(t, group, securityFlags(e.repo), "-e", "SANDBOXD_TASK=first")))
	})
	t.Run("group image without a choice", func(t *testing.T) {
		args := append([]string{"run", "--rm", "--label", "org.sandboxd.e2e=1"}, securityFlags(e.repo)...)
		out, err := dockerErr(context.Background(), append(args, group, "sh", "-c", "sleep infinity")...)
		require.Error(t, err, "serve refuses to guess: %s", out)
		assert.Contains(t, err.Error(), "choose one with SANDBOXD_TASK=NAME")
	})
}
