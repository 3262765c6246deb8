package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandboxd/pkg/doctor"
	"github.com/sandboxd/sandboxd/pkg/layer"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// repo is the checkout's root, for testdata and images/seccomp.json.
func repo(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// entryOf is the manifest entry adapt records for the task in dir (as
// layer's taskEntry fills it), with image as its tag.
func entryOf(t *testing.T, dir, image string) layer.TaskEntry {
	tk, err := task.Load(dir)
	require.NoError(t, err)
	net := func(n task.Network) layer.Network {
		return layer.Network{Mode: string(n.Mode), AllowedHosts: n.AllowedHosts}
	}
	return layer.TaskEntry{
		Name: tk.Name, Dir: dir, Image: image,
		Timeouts: layer.Timeouts{AgentSec: tk.Agent.Timeout.Seconds(), VerifierSec: tk.Verifier.Timeout.Seconds()},
		Resources: layer.Resources{CPUs: tk.Environment.CPUs, MemoryMB: tk.Environment.MemoryMB,
			StorageMB: tk.Environment.StorageMB, GPUs: tk.Environment.GPUs},
		Network: layer.Networks{Agent: net(tk.AgentNetwork()), Verifier: net(tk.VerifierNetwork())},
	}
}

// strict decodes a written file into the real API type: an unknown or
// misplaced field, or a duplicate key, fails.
func strict(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, into), "%s does not decode strictly", path)
}

// writeOne writes the manifests of one task and returns the directory.
func writeOne(t *testing.T, m *layer.Manifest) (string, []string) {
	out := t.TempDir()
	files, err := Write(out, m, Options{Version: "test", Seccomp: filepath.Join(repo(t), "images", "seccomp.json")})
	require.NoError(t, err)
	return out, files
}

// TestManifestsDecodeStrictly decodes every file adapt --k8s writes into
// k8s.io/api's and agent-sandbox's own Go types, and checks field by field
// what sandboxd needs (docs/failures.md#kubernetes-manifests-carry-what-the-sandbox-needs).
func TestManifestsDecodeStrictly(t *testing.T) {
	dir := filepath.Join(repo(t), "testdata", "tasks", "allowlist")
	e := entryOf(t, dir, "registry.test/sandboxd/tasks:allowlist")
	e.Resources = layer.Resources{CPUs: 1.5, MemoryMB: 2048, StorageMB: 4096}
	out, files := writeOne(t, &layer.Manifest{Tasks: []layer.TaskEntry{e}})
	name := Name(e.Name)

	var kinds []string
	for _, f := range files {
		if strings.HasSuffix(f, ".json") {
			continue
		}
		var typed struct {
			Kind string `json:"kind"`
		}
		strict(t, f, &map[string]any{})
		data, _ := os.ReadFile(f)
		require.NoError(t, yaml.Unmarshal(data, &typed))
		kinds = append(kinds, typed.Kind)
	}
	sort.Strings(kinds)
	assert.Equal(t, []string{"Job", "Pod", "SandboxTemplate", "SandboxWarmPool"}, kinds, "every file written is one of the four, and each is decoded below")

	var pod corev1.Pod
	strict(t, filepath.Join(out, name, PodFile), &pod)
	assert.Equal(t, "v1", pod.APIVersion)
	assert.Equal(t, name, pod.Name)
	checkPodSpec(t, pod.Spec, e, true)

	var job batchv1.Job
	strict(t, filepath.Join(out, name, JobFile), &job)
	assert.Equal(t, "batch/v1", job.APIVersion)
	require.NotNil(t, job.Spec.BackoffLimit)
	assert.Equal(t, int32(0), *job.Spec.BackoffLimit, "a retried Pod would be a second rollout")
	require.NotNil(t, job.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, int64(e.Timeouts.AgentSec+e.Timeouts.VerifierSec)+startMarginSec, *job.Spec.ActiveDeadlineSeconds)
	checkPodSpec(t, job.Spec.Template.Spec, e, true)

	var tmpl extv1beta1.SandboxTemplate
	strict(t, filepath.Join(out, name, TemplateFile), &tmpl)
	assert.Equal(t, extv1beta1.GroupVersion.String(), tmpl.APIVersion)
	assert.Equal(t, "SandboxTemplate", tmpl.Kind)
	checkPodSpec(t, tmpl.Spec.PodTemplate.Spec, e, false)
	assert.Equal(t, extv1beta1.EnvVarsInjectionPolicyDisallowed, tmpl.Spec.EnvVarsInjectionPolicy, "a claim must not set serve's variables")
	assert.Equal(t, extv1beta1.NetworkPolicyManagementManaged, tmpl.Spec.NetworkPolicyManagement)
	require.NotNil(t, tmpl.Spec.NetworkPolicy)
	require.Len(t, tmpl.Spec.NetworkPolicy.Ingress, 1)
	in := tmpl.Spec.NetworkPolicy.Ingress[0]
	require.Len(t, in.Ports, 1)
	assert.Equal(t, 2222, in.Ports[0].Port.IntValue(), "SSH reaches the sandbox")
	require.Len(t, in.From, 1)
	assert.Equal(t, map[string]string{HarnessLabel: "true"}, in.From[0].PodSelector.MatchLabels, "from the harness's Pods only")
	assert.NotEmpty(t, tmpl.Spec.NetworkPolicy.Egress, "an allowlist task's proxy reaches out")
	require.NotNil(t, tmpl.Spec.Service)
	assert.True(t, *tmpl.Spec.Service, "the harness reaches a claimed sandbox by its Service name")

	var pool extv1beta1.SandboxWarmPool
	strict(t, filepath.Join(out, name, WarmPoolFile), &pool)
	assert.Equal(t, "SandboxWarmPool", pool.Kind)
	assert.Equal(t, tmpl.Name, pool.Spec.TemplateRef.Name)
	require.NotNil(t, pool.Spec.Replicas)
	assert.Equal(t, int32(1), *pool.Spec.Replicas)

	prof, err := os.ReadFile(filepath.Join(out, ProfileFile))
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join(repo(t), "images", "seccomp.json"))
	require.NoError(t, err)
	assert.Equal(t, want, prof, "the profile the nodes get is images/seccomp.json")
}

// checkPodSpec checks what the sandbox needs in a written Pod spec.
func checkPodSpec(t *testing.T, s corev1.PodSpec, e layer.TaskEntry, trial bool) {
	t.Helper()
	require.NotNil(t, s.HostUsers)
	assert.False(t, *s.HostUsers, "procMount Unmasked is accepted only in a user namespace")
	require.NotNil(t, s.AutomountServiceAccountToken)
	assert.False(t, *s.AutomountServiceAccountToken, "no API token in a container an agent shares")
	assert.Equal(t, corev1.RestartPolicyNever, s.RestartPolicy, "one root filesystem, one rollout")
	require.Len(t, s.Containers, 1)
	c := s.Containers[0]
	assert.Equal(t, e.Image, c.Image)

	sc := c.SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.ProcMount)
	assert.Equal(t, corev1.UnmaskedProcMount, *sc.ProcMount)
	require.NotNil(t, sc.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeLocalhost, sc.SeccompProfile.Type)
	require.NotNil(t, sc.SeccompProfile.LocalhostProfile)
	assert.Equal(t, ProfileFile, *sc.SeccompProfile.LocalhostProfile, "the file written under DIR is the one named")
	require.NotNil(t, sc.AppArmorProfile)
	assert.Equal(t, corev1.AppArmorProfileTypeUnconfined, sc.AppArmorProfile.Type)
	require.NotNil(t, sc.Privileged)
	assert.False(t, *sc.Privileged)
	require.NotNil(t, sc.RunAsUser)
	assert.Equal(t, int64(0), *sc.RunAsUser, "serve starts as root in the Pod's user namespace")
	require.NotNil(t, sc.Capabilities)
	var want []corev1.Capability
	for _, cp := range doctor.Runtime.Capabilities {
		want = append(want, corev1.Capability(cp.Name))
	}
	assert.ElementsMatch(t, want, sc.Capabilities.Add, "exactly the documented capabilities")
	assert.Empty(t, sc.Capabilities.Drop)

	for name, q := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: "1500m", corev1.ResourceMemory: "2048Mi", corev1.ResourceEphemeralStorage: "4096Mi",
	} {
		wantQ := resource.MustParse(q)
		got, ok := c.Resources.Requests[name]
		if assert.True(t, ok, "request %s", name) {
			assert.Zero(t, wantQ.Cmp(got), "request %s = %s", name, got.String())
		}
		got, ok = c.Resources.Limits[name]
		if assert.True(t, ok, "limit %s", name) {
			assert.Zero(t, wantQ.Cmp(got), "limit %s = %s", name, got.String())
		}
	}

	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.Exec)
	assert.Equal(t, []string{layer.BinaryPath, "status", "--ready"}, c.ReadinessProbe.Exec.Command)
	require.NotNil(t, c.StartupProbe)
	assert.Equal(t, c.ReadinessProbe.Exec.Command, c.StartupProbe.Exec.Command)
	require.NotNil(t, c.LivenessProbe)
	require.NotNil(t, c.LivenessProbe.Exec)
	assert.Equal(t, []string{layer.BinaryPath, "status"}, c.LivenessProbe.Exec.Command)

	// Keys by reference only: no variable carries a value that could be a
	// key, the agents' keys come from a Secret, the harness's lie under
	// the harness dir (which the sandbox does not have).
	env := map[string]corev1.EnvVar{}
	for _, v := range c.Env {
		env[v.Name] = v
		assert.NotContains(t, v.Value, "ssh-", "no key inline")
	}
	agent, ok := env["SANDBOXD_AUTHORIZED_KEYS"]
	if trial {
		require.True(t, ok, "a trial's agent keys come from its Secret")
		require.NotNil(t, agent.ValueFrom)
		require.NotNil(t, agent.ValueFrom.SecretKeyRef)
		assert.Equal(t, DefaultAgentKeysSecret, agent.ValueFrom.SecretKeyRef.Name)
		assert.Equal(t, SecretKey, agent.ValueFrom.SecretKeyRef.Key)
		assert.Empty(t, agent.Value)
	} else {
		assert.False(t, ok, "a warm Pod has no trial's key: keys --authorize delivers it")
	}
	hk := env["SANDBOXD_HARNESS_KEYS"].Value
	assert.True(t, strings.HasPrefix(hk, layer.HarnessDir+"/"), "harness keys under the harness dir: %s", hk)
	require.Len(t, c.VolumeMounts, 1)
	m := c.VolumeMounts[0]
	assert.True(t, m.ReadOnly)
	assert.True(t, strings.HasPrefix(m.MountPath, layer.HarnessDir+"/"), "the Secret is mounted under the harness dir only")
	assert.Equal(t, filepath.Dir(hk), m.MountPath)
	require.Len(t, s.Volumes, 1)
	require.NotNil(t, s.Volumes[0].Secret)
	assert.Equal(t, DefaultHarnessKeysSecret, s.Volumes[0].Secret.SecretName)
}

// TestComposeSidecars: a compose task's sidecars become native sidecars of
// the Pod, and the names its baked peers target resolve to loopback.
func TestComposeSidecars(t *testing.T) {
	dir := filepath.Join(repo(t), "testdata", "compose", "redis-peer")
	e := entryOf(t, dir, "registry.test/sandboxd/compose:redis-peer")
	m := &layer.Manifest{
		Tasks:  []layer.TaskEntry{e},
		Groups: []layer.GroupEntry{{Tasks: []string{e.Name}, Sidecars: []layer.SidecarEntry{{Service: "redis", Image: "registry.test/sandboxd/redis:built", Built: true}}}},
	}
	out, _ := writeOne(t, m)
	var pod corev1.Pod
	strict(t, filepath.Join(out, Name(e.Name), PodFile), &pod)
	require.Len(t, pod.Spec.InitContainers, 1)
	sc := pod.Spec.InitContainers[0]
	assert.Equal(t, "redis", sc.Name)
	assert.Equal(t, "registry.test/sandboxd/redis:built", sc.Image, "the image adapt built for it")
	require.NotNil(t, sc.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *sc.RestartPolicy, "a native sidecar: it does not keep a Job from completing")
	require.Len(t, sc.Ports, 1)
	assert.Equal(t, int32(6379), sc.Ports[0].ContainerPort)
	assert.Equal(t, []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"redis"}}}, pod.Spec.HostAliases,
		"the peer's baked target redis:6379 is the sidecar on the Pod's loopback")
	var tmpl extv1beta1.SandboxTemplate
	strict(t, filepath.Join(out, Name(e.Name), TemplateFile), &tmpl)
	assert.Len(t, tmpl.Spec.PodTemplate.Spec.InitContainers, 1)
	assert.Empty(t, tmpl.Spec.NetworkPolicy.Egress, "a no-network task's Pod reaches nothing out")
}

// TestRefusals: what a Pod cannot carry as declared is refused with the
// reason, and the other tasks are still written.
func TestRefusals(t *testing.T) {
	good := entryOf(t, filepath.Join(repo(t), "testdata", "tasks", "no-network"), "registry.test/x:no-network")
	composeTask := func(t *testing.T, service string) string {
		dir := t.TempDir()
		src := filepath.Join(repo(t), "testdata", "compose", "redis-peer")
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "environment"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "tests"), 0o755))
		for _, f := range []string{"task.toml", "instruction.md", "tests/test.sh"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "environment", "Dockerfile"), []byte("FROM debian:bookworm\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "environment", "docker-compose.yaml"), []byte("services:\n"+service), 0o644))
		return dir
	}
	for _, tc := range []struct {
		name  string
		entry func(t *testing.T) layer.TaskEntry
		want  string
	}{
		{"gpus", func(t *testing.T) layer.TaskEntry {
			e := entryOf(t, filepath.Join(repo(t), "testdata", "tasks", "allowlist"), "registry.test/x:gpu")
			e.Resources.GPUs = 1
			return e
		}, "gpus = 1"},
		{"sidecar volumes", func(t *testing.T) layer.TaskEntry {
			return entryOf(t, composeTask(t, "  db:\n    image: postgres:16\n    expose: [\"5432\"]\n    volumes: [\"data:/var/lib/postgresql\"]\n"), "registry.test/x:vol")
		}, "service db sets volumes"},
		{"sidecar on the SSH port", func(t *testing.T) layer.TaskEntry {
			return entryOf(t, composeTask(t, "  web:\n    image: nginx\n    expose: [\"2222\"]\n"), "registry.test/x:port")
		}, "port 2222 like sandboxd's SSH"},
		{"quoted command", func(t *testing.T) layer.TaskEntry {
			return entryOf(t, composeTask(t, "  web:\n    image: nginx\n    expose: [\"80\"]\n    command: sh -c 'exec nginx'\n"), "registry.test/x:cmd")
		}, "write it as a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.entry(t)
			bad.Name = "bad-" + strings.ReplaceAll(tc.name, " ", "-")
			out := t.TempDir()
			files, err := Write(out, &layer.Manifest{Tasks: []layer.TaskEntry{bad, good}}, Options{Seccomp: filepath.Join(repo(t), "images", "seccomp.json")})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "task "+bad.Name)
			assert.NoDirExists(t, filepath.Join(out, Name(bad.Name)), "nothing written for the refused task")
			assert.FileExists(t, filepath.Join(out, Name(good.Name), PodFile), "the other task is written")
			assert.Len(t, files, 5)
		})
	}
	_, err := Write(t.TempDir(), &layer.Manifest{Tasks: []layer.TaskEntry{good}}, Options{})
	require.Error(t, err, "no seccomp profile, no manifests")
	assert.Contains(t, err.Error(), "SANDBOXD_SECCOMP_PROFILE")
}

func TestName(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, tc := range []struct{ in, want string }{
		{"hello-world", "hello-world"},
		{"Hello_World", "hello-world-" + hash8("Hello_World")},
		{"fix.git", "fix-git-" + hash8("fix.git")},
		{"--", "task-" + hash8("--")},
		{long, strings.Repeat("a", maxName-9) + "-" + hash8(long)},
	} {
		got := Name(tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.LessOrEqual(t, len(got), maxName)
	}
	assert.NotEqual(t, Name("a_b"), Name("a.b"), "two tasks never share a name")
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

// TestComposeSidecarsInterpolated: a sidecar is carried as adapt read it,
// interpolated as Compose does under Harbor (its port and command from
// environment/.env).
func TestComposeSidecarsInterpolated(t *testing.T) {
	dir := filepath.Join(repo(t), "testdata", "compose", "redis-interpolated")
	e := entryOf(t, dir, "registry.test/sandboxd/compose:redis-interpolated")
	m := &layer.Manifest{
		Tasks:  []layer.TaskEntry{e},
		Groups: []layer.GroupEntry{{Tasks: []string{e.Name}, Sidecars: []layer.SidecarEntry{{Service: "cache", Image: "registry.test/sandboxd/cache:built", Built: true}}}},
	}
	out, _ := writeOne(t, m)
	var job batchv1.Job
	strict(t, filepath.Join(out, Name(e.Name), JobFile), &job)
	require.Len(t, job.Spec.Template.Spec.InitContainers, 1)
	sc := job.Spec.Template.Spec.InitContainers[0]
	assert.Equal(t, "cache", sc.Name)
	require.Len(t, sc.Ports, 1)
	assert.Equal(t, int32(6380), sc.Ports[0].ContainerPort, "REDIS_PORT from environment/.env")
	assert.Equal(t, []string{"redis-server", "--port", "6380", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"}, sc.Args)
	assert.Empty(t, sc.Command, "compose's command is the image's CMD: a Pod's args")
	assert.Equal(t, []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"cache"}}}, job.Spec.Template.Spec.HostAliases)
}
