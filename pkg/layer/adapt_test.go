package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/pkg/layer/engine"
	"github.com/sandboxd/sandboxd/pkg/task"
)

type adaptRun struct {
	t    *testing.T
	root string // the dataset directory, "tb"
	eng  *fakeEngine
	opts Options
	log  bytes.Buffer
}

func newRun(t *testing.T) *adaptRun {
	r := &adaptRun{t: t, root: filepath.Join(t.TempDir(), "tb"), eng: newFakeEngine()}
	seccomp := filepath.Join(t.TempDir(), "seccomp.json")
	require.NoError(t, os.WriteFile(seccomp, []byte(`{"defaultAction":"SCMP_ACT_ERRNO"}`), 0o644))
	r.opts = Options{Prefix: "sb", Binary: stubBinary(t, false), Version: "v1.2.3", Seccomp: seccomp,
		ComposeDir: filepath.Join(t.TempDir(), "compose"), Engine: r.eng, Log: &r.log, Jobs: 2}
	return r
}

func (r *adaptRun) task(name string, files map[string]string) string {
	return writeTask(r.t, filepath.Join(r.root, name), files)
}

func (r *adaptRun) adapt(dirs ...string) (*Manifest, error) {
	if len(dirs) == 0 {
		dirs = []string{r.root}
	}
	return Adapt(context.Background(), dirs, r.opts)
}

// layerFile reads a file of the serving layer from the last archive loaded.
func (r *adaptRun) layerFile(path string) string {
	r.t.Helper()
	require.NotEmpty(r.t, r.eng.archives)
	for name, data := range r.eng.archives[len(r.eng.archives)-1] {
		if !strings.HasSuffix(name, "/layer.tar") {
			continue
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(r.t, err)
			if "/"+h.Name == path {
				b, _ := io.ReadAll(tr)
				return string(b)
			}
		}
	}
	r.t.Fatalf("%s not in the serving layer", path)
	return ""
}

func TestAdapt_Manifest(t *testing.T) {
	r := newRun(t)
	r.task("hello", taskFiles("debian:bookworm"))
	r.task("bye", with(taskFiles("debian:bookworm"), map[string]string{
		"task.toml": "schema_version = \"1.1\"\n[verifier]\ntimeout_sec = 30.0\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n[agent]\ntimeout_sec = 99.0\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 512\nnetwork_mode = \"no-network\"\n",
	}))
	m, err := r.adapt()
	require.NoError(t, err, r.log.String())
	require.True(t, m.OK(), "%+v", m.Errors)
	assert.Equal(t, "fake 1.0", m.Engine)
	require.Len(t, m.Groups, 1)
	g := m.Groups[0]
	assert.Equal(t, []string{"bye", "hello"}, g.Tasks)
	assert.Equal(t, "load", g.Assembly)
	assert.Empty(t, g.Installed, "the base had bwrap; it lacks util-linux, which serve does not need")
	assert.Empty(t, g.ToolsID, "no install step")
	for _, b := range r.eng.builds {
		assert.NotContains(t, b.What, "tools install")
	}
	assert.Equal(t, int64(8e6-1), g.LayerBytes, "image size over the base's")
	assert.Equal(t, g.Digest, r.eng.images[g.Image].ID)

	require.Len(t, m.Tasks, 2)
	bye := m.Tasks[0]
	assert.Equal(t, "bye", bye.Name)
	assert.Equal(t, filepath.Join(r.root, "bye"), bye.Dir)
	assert.Equal(t, "sb/tb:bye", bye.Image)
	assert.Equal(t, g.Image, bye.GroupImage)
	assert.Equal(t, r.eng.images["sb/tb:bye"].ID, bye.Digest)
	assert.Equal(t, Timeouts{AgentSec: 99, VerifierSec: 30, BuildSec: 300}, bye.Timeouts)
	assert.Equal(t, Resources{CPUs: 1, MemoryMB: 512}, bye.Resources)
	assert.Equal(t, Networks{Agent: Network{Mode: "no-network"}, Verifier: Network{Mode: "allowlist", AllowedHosts: []string{"pypi.org"}}}, bye.Network)

	// The group image runs sandboxd serve as root; the task image names its task.
	gi := r.eng.images[g.Image]
	assert.Equal(t, "root", gi.Config.User)
	assert.Equal(t, []string{BinaryPath, "serve"}, gi.Config.Entrypoint)
	assert.Empty(t, gi.Config.Cmd)
	assert.Equal(t, "bye,hello", gi.Config.Labels[LabelTasks])
	assert.Equal(t, "v1.2.3", gi.Config.Labels[LabelVersion])
	ti := r.eng.images["sb/tb:hello"]
	assert.Equal(t, []string{"--task", "hello"}, ti.Config.Cmd)
	assert.Contains(t, ti.Config.Env, "SANDBOXD_TASK=hello")
	assert.Equal(t, gi.Layers, ti.Layers, "config only")

	// The facts of the base (the fake build's config) reach serve.
	sb, _, err := task.ParseSandboxd("sandboxd.toml", []byte(r.layerFile("/media/sandboxd/tasks/hello/sandboxd.toml")))
	require.NoError(t, err)
	assert.Equal(t, []string{"/docker-entrypoint.sh"}, sb.Entrypoint)
	assert.Equal(t, "app", sb.ImageUser)
	assert.Equal(t, "/app", sb.ImageWorkdir)
	assert.Equal(t, "PATH=/usr/local/bin:/usr/bin:/bin", sb.ImageEnv.Environ()[0])
	assert.Contains(t, r.layerFile("/media/sandboxd/tasks/bye/task.toml"), "allowlist")

	var table bytes.Buffer
	m.WriteTable(&table)
	assert.Contains(t, table.String(), "hello  sb/tb:hello")
	assert.Contains(t, table.String(), "8.0 MB")

	js, err := json.Marshal(m)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"tasks":[{"name":"bye"`)
	assert.Contains(t, string(js), `"errors":[]`, "an empty list, not null")
}

// One bad task in a batch: the others are adapted, the bad one is named.
func TestAdapt_BatchWithBadTask(t *testing.T) {
	r := newRun(t)
	r.task("good", taskFiles("debian:bookworm"))
	r.task("bad", with(taskFiles("debian:bookworm"), map[string]string{"task.toml": "schema_version = \"1.1\"\n[environment]\ncpus = \"two\"\n"}))
	m, err := r.adapt()
	require.NoError(t, err)
	assert.False(t, m.OK())
	require.Len(t, m.Tasks, 1)
	assert.Equal(t, "good", m.Tasks[0].Name)
	require.Len(t, m.Errors, 1)
	assert.Equal(t, "bad", m.Errors[0].Name)
	assert.Contains(t, m.Errors[0].Error, "bad/task.toml:3: environment.cpus")
	var table bytes.Buffer
	m.WriteTable(&table)
	assert.Regexp(t, `(?m)^bad +- +- +FAILED: .*bad/task.toml:3: environment.cpus`, table.String())
}

func TestAdapt_Refusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *adaptRun)
		want  string
	}{
		{"no bwrap, no package manager", func(r *adaptRun) {
			r.eng.probe = harborAll + "tool bash /bin/bash\ntool nsenter /usr/bin/nsenter\ntool setpriv /usr/bin/setpriv\ntool unshare /usr/bin/unshare\nroot\nend\n"
		},
			"base environment/Dockerfile: the image lacks bwrap and has no package manager (apt-get, apk, dnf, microdnf, yum) to install bubblewrap: add bubblewrap to the image (environment/Dockerfile)"},
		{"no shell", func(r *adaptRun) {
			r.eng.probeCode = 127
			r.eng.probe = "exec: \"/bin/sh\": stat /bin/sh: no such file or directory"
		},
			"base environment/Dockerfile: it has no /bin/sh"},
		{"another architecture", func(r *adaptRun) { r.eng.arch = "mips64" },
			"base environment/Dockerfile: it is linux/mips64 and this sandboxd is linux/"},
		{"the base build fails", func(r *adaptRun) {
			r.eng.failBuild = map[string]*engine.BuildError{"environment/Dockerfile": {What: "environment/Dockerfile of t", Tail: []string{"Step 2/2 : RUN false", "returned a non-zero code: 1"}, Err: io.ErrUnexpectedEOF}}
		}, "build of environment/Dockerfile of t failed: unexpected EOF; its last 2 lines:\n    Step 2/2 : RUN false\n    returned a non-zero code: 1"},
		{"the install is refused", func(r *adaptRun) {
			r.eng.probe = harborAll + "tool nsenter /usr/bin/nsenter\npm apk\nroot\nend\n"
			r.eng.failBuild = map[string]*engine.BuildError{"tools install": {Tail: []string{refusedMarker + "bwrap is still missing after installing bubblewrap"}}}
		}, "base environment/Dockerfile: bwrap is still missing after installing bubblewrap"},
		{"docker_image absent and not pullable", func(r *adaptRun) {
			r.task("t", with(taskFiles(""), map[string]string{"environment/Dockerfile": "", "task.toml": "schema_version = \"1.1\"\n[environment]\ndocker_image = \"ghcr.io/x/y:1\"\n"}))
		}, "base ghcr.io/x/y:1 is not in the local engine and pulling it failed: pull access denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t)
			r.task("t", taskFiles("debian:bookworm"))
			tc.setup(r)
			m, err := r.adapt()
			require.NoError(t, err)
			require.Len(t, m.Errors, 1, r.log.String())
			assert.Contains(t, m.Errors[0].Error, tc.want)
			require.Len(t, m.Groups, 1)
			assert.NotEmpty(t, m.Groups[0].Error)
			assert.Empty(t, m.Tasks)
		})
	}
}

func TestAdapt_InstallsMissingTools(t *testing.T) {
	r := newRun(t)
	r.task("t", taskFiles("debian:bookworm"))
	r.eng.probe = harborAll + "tool nsenter /usr/bin/nsenter\ntool setpriv /usr/bin/setpriv\ntool unshare /usr/bin/unshare\npm apt-get\nroot\nend\n"
	m, err := r.adapt()
	require.NoError(t, err)
	require.True(t, m.OK(), "%+v", m.Errors)
	g := m.Groups[0]
	assert.Equal(t, []string{"bubblewrap"}, g.Installed)
	require.NotEmpty(t, g.ToolsID)
	var tools *engine.BuildSpec
	for i, b := range r.eng.builds {
		if strings.Contains(b.What, "tools install") {
			tools = &r.eng.builds[i]
		}
	}
	require.NotNil(t, tools)
	assert.Equal(t, g.BaseID, tools.Args["BASE"], "installed over the base")
	df, err := os.ReadFile(filepath.Join(tools.Context, "Dockerfile"))
	if err == nil { // the context is removed after the build; the spec is enough
		assert.Contains(t, string(df), "USER root")
	}
	toolsImg := r.eng.images[g.ToolsID]
	assert.Equal(t, append(append([]string{}, toolsImg.Layers...), r.eng.images[g.Image].Layers[len(toolsImg.Layers)]), r.eng.images[g.Image].Layers,
		"the serving layer goes over the tools layer")
	// The facts are the base's, not the tools image's USER root.
	sb, _, err := task.ParseSandboxd("x", []byte(r.layerFile("/media/sandboxd/tasks/t/sandboxd.toml")))
	require.NoError(t, err)
	assert.Equal(t, "app", sb.ImageUser)
}

func TestAdapt_FallsBackToBuild(t *testing.T) {
	r := newRun(t)
	r.task("a", taskFiles("debian:bookworm"))
	r.task("b", taskFiles("debian:bookworm"))
	r.eng.loadErr = io.ErrUnexpectedEOF
	m, err := r.adapt()
	require.NoError(t, err)
	require.True(t, m.OK(), "%+v", m.Errors)
	assert.Equal(t, "build", m.Groups[0].Assembly)
	assert.Contains(t, r.log.String(), "the engine did not take the image archive")
	var whats []string
	for _, b := range r.eng.builds {
		whats = append(whats, b.What)
	}
	assert.Equal(t, []string{"environment/Dockerfile of a, b", "the serving layer of " + m.Groups[0].Name, "the image of task a", "the image of task b"}, whats)
	last := r.eng.builds[len(r.eng.builds)-1]
	assert.Equal(t, m.Groups[0].Digest, last.Args["GROUP"], "task images are built over the group image")
	assert.Equal(t, []string{"sb/tb:b"}, last.Tags)
	assert.Equal(t, r.eng.images["sb/tb:b"].ID, m.Tasks[1].Digest)
}

func TestAdapt_Podman(t *testing.T) {
	r := newRun(t)
	r.task("a", taskFiles("debian:bookworm"))
	r.eng.partial = false
	r.eng.probe = harborAll + "tool nsenter /usr/bin/nsenter\ntool setpriv /usr/bin/setpriv\ntool unshare /usr/bin/unshare\npm dnf\nroot\nend\n"
	m, err := r.adapt()
	require.NoError(t, err)
	require.True(t, m.OK(), "%+v", m.Errors)
	assert.Equal(t, "build", m.Groups[0].Assembly)
	assert.Empty(t, m.Groups[0].ToolsID, "the serving Dockerfile installs them itself")
	assert.Equal(t, []string{"bubblewrap"}, m.Groups[0].Installed)
	assert.NotContains(t, r.eng.calls, "load")
}

func TestAdapt_Compose(t *testing.T) {
	r := newRun(t)
	r.task("cache", with(taskFiles("sandboxd-base:bookworm"), map[string]string{
		"environment/docker-compose.yaml": "services:\n  main:\n    environment:\n      REDIS_HOST: redis\n  redis:\n    build: ./redis\n    expose: [\"6379\"]\n",
		"environment/redis/Dockerfile":    "FROM sandboxd-base:bookworm\nRUN apt-get install -y redis-server\n",
	}))
	m, err := r.adapt()
	require.NoError(t, err)
	require.True(t, m.OK(), "%+v", m.Errors)
	g := m.Groups[0]
	require.Len(t, g.Sidecars, 1)
	assert.Equal(t, SidecarEntry{Service: "redis", Image: "sb/" + g.Name + "-redis:latest", Built: true}, g.Sidecars[0])
	assert.Contains(t, r.eng.calls, "build sidecar redis")
	e := m.Tasks[0]
	assert.Equal(t, []Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}, e.Peers)
	require.NotEmpty(t, e.Compose)
	assert.FileExists(t, filepath.Join(filepath.Dir(e.Compose), "seccomp.json"), "the profile next to the file that names it")
	var doc struct{ Services map[string]map[string]any }
	data, err := os.ReadFile(e.Compose)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &doc))
	assert.Equal(t, "sb/tb:cache", doc.Services["main"]["image"])
	assert.Equal(t, "sb/"+g.Name+"-redis:latest", doc.Services["redis"]["image"])

	sb, _, err := task.ParseSandboxd("x", []byte(r.layerFile("/media/sandboxd/tasks/cache/sandboxd.toml")))
	require.NoError(t, err)
	assert.Equal(t, []task.Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}, sb.Peers)
	v, _ := sb.ImageEnv.Lookup("REDIS_HOST")
	assert.Equal(t, "redis", v, "main's compose environment is part of what the sandbox sees")
}

func TestAdapt_Push(t *testing.T) {
	r := newRun(t)
	r.task("a", taskFiles("debian:bookworm"))
	r.opts.Push = true
	m, err := r.adapt()
	require.NoError(t, err)
	require.True(t, m.OK())
	assert.Contains(t, r.eng.calls, "push "+m.Groups[0].Image)
	assert.Contains(t, r.eng.calls, "push sb/tb:a")
	assert.Equal(t, "sb/tb@sha256:"+strings.Repeat("d", 64), m.Tasks[0].RepoDigest)
}

func TestAdapt_WholeRunFailures(t *testing.T) {
	t.Run("no engine", func(t *testing.T) {
		r := newRun(t)
		r.task("a", taskFiles("x"))
		r.opts.Engine = nil
		t.Setenv("SANDBOXD_ENGINE", "no-such-engine-here")
		m, err := r.adapt()
		require.ErrorIs(t, err, engine.ErrNoEngine)
		require.Len(t, m.Errors, 1, "every task is reported, with the reason")
		assert.Contains(t, m.Errors[0].Error, "no container engine")
	})
	t.Run("dynamic binary", func(t *testing.T) {
		r := newRun(t)
		r.task("a", taskFiles("x"))
		r.opts.Binary = stubBinary(t, true)
		_, err := r.adapt()
		assert.ErrorContains(t, err, "is dynamically linked")
	})
	t.Run("bad prefix", func(t *testing.T) {
		r := newRun(t)
		r.opts.Prefix = "Bad:tag"
		_, err := r.adapt()
		assert.ErrorContains(t, err, "not a repository name component")
	})
}

func TestAdapt_Out(t *testing.T) {
	r := newRun(t)
	r.task("hello", with(taskFiles("debian:bookworm"), map[string]string{"environment/files/data.txt": "x"}))
	r.task("cache", with(taskFiles("debian:bookworm"), map[string]string{
		"environment/docker-compose.yaml": "services:\n  redis:\n    build: ./redis\n    expose: [\"6379\"]\n",
		"environment/redis/Dockerfile":    "FROM debian:bookworm\n",
	}))
	r.opts.Engine = nil
	t.Setenv("SANDBOXD_ENGINE", "no-such-engine-here") // --out needs none
	r.opts.Out = filepath.Join(t.TempDir(), "out")
	m, err := r.adapt()
	require.NoError(t, err, r.log.String())
	require.True(t, m.OK(), "%+v", m.Errors)
	out := r.opts.Out
	require.Len(t, m.Groups, 2)
	for _, g := range m.Groups {
		assert.Equal(t, filepath.Join(out, g.Name), g.Context)
		assert.FileExists(t, filepath.Join(g.Context, "serving", "Dockerfile"))
		assert.FileExists(t, filepath.Join(g.Context, "base", "Dockerfile"), "the base context travels with it")
		assert.FileExists(t, filepath.Join(g.Context, "serving", "rootfs", "media", "sandboxd", "bin", "sandboxd"))
	}
	sh, err := os.ReadFile(filepath.Join(out, "build.sh"))
	require.NoError(t, err)
	if shPath, err := exec.LookPath("sh"); err == nil {
		cmd := exec.Command(shPath, "-n", filepath.Join(out, "build.sh"))
		outb, err := cmd.CombinedOutput()
		assert.NoError(t, err, "build.sh parses: %s", outb)
	}
	assert.Contains(t, string(sh), `with_timeout 300 "$ENGINE" build --force-rm -t sb/`)
	assert.Contains(t, string(sh), `"$ENGINE" build --force-rm --build-arg GROUP=sb/`)
	assert.Contains(t, string(sh), "facts ")
	var hello GroupEntry
	for _, g := range m.Groups {
		if g.Tasks[0] == "hello" {
			hello = g
		}
	}
	df, err := os.ReadFile(filepath.Join(hello.Context, "serving", "Dockerfile"))
	require.NoError(t, err)
	assert.Contains(t, string(df), "ARG BASE="+strings.TrimSuffix(hello.Image, ":latest")+":base\nFROM ${BASE}\nUSER root\nRUN [\"/bin/sh\",\"-c\",\"set -e;")
	assert.Contains(t, string(df), "COPY rootfs/ /\nENTRYPOINT")
	tmpl, err := os.ReadFile(filepath.Join(hello.Context, "facts", "hello.tmpl"))
	require.NoError(t, err)
	assert.Contains(t, string(tmpl), "image_user = {{json .Config.User}}")
	assert.FileExists(t, filepath.Join(out, "manifest.json"))
	assert.FileExists(t, filepath.Join(out, "compose", "tb", "cache", "docker-compose.yaml"))
	for _, g := range m.Groups {
		if g.Tasks[0] == "cache" {
			assert.FileExists(t, filepath.Join(g.Context, "sidecar-redis", "Dockerfile"))
			assert.Equal(t, []SidecarEntry{{Service: "redis", Image: "sb/" + g.Name + "-redis:latest", Built: true}}, g.Sidecars)
		}
	}
	for _, e := range m.Tasks {
		assert.Empty(t, e.Digest, "nothing was built")
	}
}
