//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandboxd/pkg/kube"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// TestKubernetesPodUnderDocker adapts tasks with --k8s, reads the Pods it
// wrote, and runs each under Docker as a kubelet would run it: a holder of
// the Pod's network namespace with its hostAliases, the native sidecars in
// it, then the task container with every setting of the spec translated
// one to one (dockerRunArgs); the probes as the kubelet runs them; and a
// trial through it: the oracle over SSH, the verdict graded 1, and for the
// compose task the value the oracle stored in the sidecar, through the
// peer. What Docker cannot give one container is logged, not faked:
// hostUsers: false (TestHostUsersFalseEmulated emulates it around serve)
// and the ephemeral-storage limit
// (docs/failures.md#kubernetes-manifests-carry-what-the-sandbox-needs).
func TestKubernetesPodUnderDocker(t *testing.T) {
	e := setup(t)
	dirs := e.dataset(t, "e2e-kube", "bookworm",
		filepath.Join(e.repo, "testdata", "tasks", "reward-shapes-metrics"),
		filepath.Join(e.repo, "testdata", "compose", "redis-peer"))
	kdir := filepath.Join(e.work, "k8s")
	m, stderr, code := e.adapt(t, nil, append([]string{"--tag", prefix, "--k8s", kdir}, dirs...)...)
	require.Equal(t, 0, code, "adapt failed:\n%s", tail(stderr, 60))
	require.Len(t, m.Tasks, 2)

	// The Secrets, as files: what kubectl create secret generic --from-file takes.
	secrets := filepath.Join(e.work, "secrets")
	harnessKey := filepath.Join(e.work, "harness_key")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "e2e-harness", "-f", harnessKey).CombinedOutput()
	require.NoError(t, err, "%s", out)
	harnessPub, err := os.ReadFile(harnessKey + ".pub")
	require.NoError(t, err)
	for name, content := range map[string]string{kube.DefaultAgentKeysSecret: e.pubKey + "\n", kube.DefaultHarnessKeysSecret: string(harnessPub)} {
		require.NoError(t, os.MkdirAll(filepath.Join(secrets, name), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(secrets, name, kube.SecretKey), []byte(content), 0o400))
	}

	for _, te := range m.Tasks {
		t.Run(te.Name, func(t *testing.T) {
			tk, err := task.Load(te.Dir)
			require.NoError(t, err)
			data, err := os.ReadFile(filepath.Join(kdir, kube.Name(te.Name), kube.PodFile))
			require.NoError(t, err)
			var pod corev1.Pod
			require.NoError(t, yaml.UnmarshalStrict(data, &pod))
			e.podUnderDocker(t, pod, tk, kdir, secrets, harnessKey, te.Compose != "")
		})
	}
}

// podUnderDocker runs one written Pod and a trial through it.
func (e *env) podUnderDocker(t *testing.T, pod corev1.Pod, tk *task.Task, kdir, secrets, harnessKey string, compose bool) {
	c := pod.Spec.Containers[0]
	start := time.Now()
	p := runPod(t, pod, kdir, secrets)
	id, ip := p.main, p.ip

	// When serve is ready, polled finer than the probe's period; then the
	// kubelet's order: the startup probe until it passes, then readiness
	// and liveness.
	require.Eventually(t, func() bool {
		_, err := dockerErr(context.Background(), append([]string{"exec", id}, c.ReadinessProbe.Exec.Command...)...)
		return err == nil
	}, 2*time.Minute, 50*time.Millisecond)
	figure("kubernetes pod %s under docker: docker run to status --ready passing: %.2fs (a busy shared machine)", tk.Name, time.Since(start).Seconds())
	probeUntil(t, id, c.StartupProbe)
	for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		_, err := dockerErr(context.Background(), append([]string{"exec", id}, pr.Exec.Command...)...)
		require.NoError(t, err, "probe %v", pr.Exec.Command)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !compose {
		e.podCost(t, ctx, id, ip)
	}
	out, err := e.sshRun(ctx, ip, "test -e /media/sandboxd && echo present || echo absent", "")
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "absent\n", out, "the harness dir, and the harness keys' Secret under it, are not in the sandbox")
	out, err = e.sshRun(ctx, ip, "cd "+shq(tk.Workdir())+" && bash -s", tk.SolutionScript)
	require.NoError(t, err, "the oracle over SSH:\n%s", out)
	v := e.grade(t, id, tk.Verifier.Timeout+2*time.Minute)
	require.Equal(t, "graded", v.Status, "verdict: %+v (%s)", v, v.Stdout)
	got, ok := v.reward()
	require.True(t, ok, "no reward in %s", v.Reward)
	assert.Equal(t, 1.0, got)
	if compose {
		// The oracle reached the sidecar by its compose name, through the
		// peer, on the Pod's loopback: the value is in it.
		stored := regexp.MustCompile(`stored (\S+) in redis`).FindStringSubmatch(out)
		require.Len(t, stored, 2, "the oracle said: %s", out)
		redis := p.sidecars["redis"]
		require.NotEmpty(t, redis)
		assert.Equal(t, stored[1], strings.TrimSpace(docker(t, "exec", redis, "redis-cli", "GET", "sandboxd:answer")))
	}

	// The harness key from its Secret runs control commands over SSH.
	hout, err := exec.CommandContext(ctx, "ssh", "-i", harnessKey, "-p", "2222", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "harness@"+ip, "sandboxd", "status").CombinedOutput()
	require.NoError(t, err, "%s", hout)
	var st struct {
		Sandbox struct {
			UIDMap string `json:"uid_map"`
		} `json:"sandbox"`
	}
	require.NoError(t, json.Unmarshal(hout, &st), "%s", hout)
	figure("kubernetes pod %s under docker: status.sandbox.uid_map %q (Docker's host ids; a hostUsers: false Pod has 0 0 65536)", tk.Name, st.Sandbox.UIDMap)
}

// podRun is a Pod run under Docker: the container that holds its network
// namespace, its task container, and its sidecars by name.
type podRun struct {
	ip, main string
	sidecars map[string]string
}

// runPod runs a written Pod as a kubelet would under Docker: a holder of
// the network namespace with the Pod's hostAliases in its hosts file (the
// containers that join it share that file), each native sidecar in it, and
// then the task container.
func runPod(t *testing.T, pod corev1.Pod, kubeletSeccompRoot, secrets string) *podRun {
	t.Helper()
	run := func(args ...string) string {
		id := strings.TrimSpace(docker(t, append([]string{"run", "-d", "--label", "org.sandboxd.e2e=1"}, args...)...))
		t.Cleanup(func() { dockerErr(context.Background(), "rm", "-f", id) })
		return id
	}
	holder := []string{"--restart", "no"}
	for _, a := range pod.Spec.HostAliases {
		for _, h := range a.Hostnames {
			holder = append(holder, "--add-host", h+":"+a.IP)
		}
	}
	hid := run(append(holder, "sandboxd-base:bookworm", "sleep", "infinity")...)
	ns := "container:" + hid
	p := &podRun{ip: containerIP(t, hid), sidecars: map[string]string{}}
	for _, sc := range pod.Spec.InitContainers {
		require.NotNil(t, sc.RestartPolicy, "init container %s", sc.Name)
		require.Equal(t, corev1.ContainerRestartPolicyAlways, *sc.RestartPolicy, "only native sidecars are written")
		require.Nil(t, sc.SecurityContext, "a sidecar runs with the runtime's defaults")
		args := []string{"--network", ns}
		for _, v := range sc.Env {
			require.Nil(t, v.ValueFrom, "a sidecar's variables are values")
			args = append(args, "-e", v.Name+"="+v.Value)
		}
		if sc.WorkingDir != "" {
			args = append(args, "-w", sc.WorkingDir)
		}
		if len(sc.Command) > 0 {
			args = append(args, "--entrypoint", sc.Command[0])
		}
		args = append(args, sc.Image)
		if len(sc.Command) > 1 {
			args = append(args, sc.Command[1:]...)
		}
		p.sidecars[sc.Name] = run(append(args, sc.Args...)...)
	}
	args, untranslated := dockerRunArgs(t, pod, kubeletSeccompRoot, secrets)
	for _, u := range untranslated {
		figure("kubernetes pod %s under docker: not translated: %s", pod.Name, u)
	}
	p.main = run(append(append(args, "--network", ns), pod.Spec.Containers[0].Image)...)
	return p
}

// dockerRunArgs translates the task container of a written Pod into
// `docker run` options, field by field, and names what has no Docker
// equivalent. It fails the test on a field it does not know, so that a
// setting added to the manifests cannot go untested here.
func dockerRunArgs(t *testing.T, pod corev1.Pod, kubeletSeccompRoot, secrets string) (args, untranslated []string) {
	t.Helper()
	spec := pod.Spec
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	if spec.HostUsers != nil && !*spec.HostUsers {
		untranslated = append(untranslated, "hostUsers: false (this engine gives one container no user namespace of its own; TestHostUsersFalseEmulated)")
	}
	require.Equal(t, corev1.RestartPolicyNever, spec.RestartPolicy)
	args = append(args, "--restart", "no")

	sc := c.SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.SeccompProfile)
	require.Equal(t, corev1.SeccompProfileTypeLocalhost, sc.SeccompProfile.Type)
	args = append(args, "--security-opt", "seccomp="+filepath.Join(kubeletSeccompRoot, *sc.SeccompProfile.LocalhostProfile))
	require.NotNil(t, sc.AppArmorProfile)
	require.Equal(t, corev1.AppArmorProfileTypeUnconfined, sc.AppArmorProfile.Type)
	args = append(args, "--security-opt", "apparmor=unconfined")
	require.NotNil(t, sc.ProcMount)
	require.Equal(t, corev1.UnmaskedProcMount, *sc.ProcMount)
	args = append(args, "--security-opt", "systempaths=unconfined")
	require.False(t, *sc.Privileged)
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.RunAsUser != nil {
		args = append(args, "--user", strconv.FormatInt(*sc.RunAsUser, 10))
	}
	for _, cp := range sc.Capabilities.Add {
		args = append(args, "--cap-add", string(cp))
	}
	for _, cp := range sc.Capabilities.Drop {
		args = append(args, "--cap-drop", string(cp))
	}

	for name, q := range c.Resources.Limits {
		switch name {
		case corev1.ResourceCPU:
			args = append(args, "--cpus", fmt.Sprintf("%.3f", q.AsApproximateFloat64()))
		case corev1.ResourceMemory:
			args = append(args, "--memory", strconv.FormatInt(q.Value(), 10)+"b")
		case corev1.ResourceEphemeralStorage:
			untranslated = append(untranslated, "ephemeral-storage "+q.String()+" (docker --storage-opt size= needs overlay2 on xfs with pquota; not this engine)")
		default:
			t.Fatalf("limit %s has no translation here", name)
		}
	}
	for _, v := range c.Env {
		switch {
		case v.ValueFrom != nil:
			require.NotNil(t, v.ValueFrom.SecretKeyRef, "env %s", v.Name)
			b, err := os.ReadFile(filepath.Join(secrets, v.ValueFrom.SecretKeyRef.Name, v.ValueFrom.SecretKeyRef.Key))
			require.NoError(t, err)
			args = append(args, "-e", v.Name+"="+string(b))
		default:
			args = append(args, "-e", v.Name+"="+v.Value)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		require.True(t, ok, "volume %s", vm.Name)
		require.NotNil(t, v.Secret, "only Secret volumes are written")
		opt := filepath.Join(secrets, v.Secret.SecretName) + ":" + vm.MountPath
		if vm.ReadOnly {
			opt += ":ro"
		}
		args = append(args, "-v", opt)
	}
	require.Empty(t, c.Command, "the image's ENTRYPOINT is sandboxd serve")
	require.Empty(t, c.Args)
	return args, untranslated
}

// probeUntil runs an exec probe every periodSeconds until it passes, at
// most failureThreshold times, as the kubelet runs a startup probe.
func probeUntil(t *testing.T, id string, p *corev1.Probe) time.Duration {
	t.Helper()
	require.NotNil(t, p)
	require.NotNil(t, p.Exec)
	start := time.Now()
	var last error
	for i := int32(0); i < p.FailureThreshold; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(p.TimeoutSeconds)*time.Second)
		_, err := dockerErr(ctx, append([]string{"exec", id}, p.Exec.Command...)...)
		cancel()
		if err == nil {
			return time.Since(start)
		}
		last = err
		time.Sleep(time.Duration(p.PeriodSeconds) * time.Second)
	}
	logs, _ := dockerErr(context.Background(), "logs", id)
	t.Fatalf("the probe %v did not pass in %d tries: %v; logs:\n%s", p.Exec.Command, p.FailureThreshold, last, logs)
	return 0
}

// TestHostUsersFalseEmulated runs serve (host mode) as root of a user
// namespace of 65,536 ids, host ids 100000–165535, as a hostUsers: false
// Pod's container runs, which this Docker engine cannot give one container
// (docs/kubernetes.md, "What hostUsers: false changes"). The sandbox is
// built in it with the identity map of those ids, status says so, and
// OpenSSH gets a session whose uid_map is 0 0 65536. What differs from a
// Pod, and is pinned here too: the host's files are not id-mapped into
// this namespace, so they show as the overflow id 65534, and what the
// agent creates lands on the host as uid 100000.
func TestHostUsersFalseEmulated(t *testing.T) {
	e := setup(t)
	const base, size = 100000, 65536
	// Not under t.TempDir(), whose parent only the host's root may enter:
	// this namespace's root is host uid 100000.
	dir, err := os.MkdirTemp("", "sandboxd-userns-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	bin := filepath.Join(dir, "sandboxd")
	b, err := os.ReadFile(e.bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	harness := filepath.Join(dir, "harness")
	require.NoError(t, os.Mkdir(harness, 0o700))
	require.NoError(t, os.Chown(harness, base, base))
	keys := filepath.Join(dir, "authorized_keys")
	require.NoError(t, os.WriteFile(keys, []byte(e.pubKey+"\n"), 0o644))
	// In a directory of its own: the harness dir's parent is rebuilt inside
	// the sandbox (a tmpfs, its other entries bound back).
	require.NoError(t, os.Mkdir(filepath.Join(dir, "out"), 0o777))
	require.NoError(t, os.Chmod(filepath.Join(dir, "out"), 0o777))
	probe := filepath.Join(dir, "out", "made-by-the-agent")

	cmd := exec.Command(bin, "serve", "--host", "--harness-dir", harness, "--listen", "127.0.0.1:0", "--authorized-keys", keys)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: size}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: size}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
	}
	logs := filepath.Join(dir, "serve.log")
	lf, err := os.Create(logs)
	require.NoError(t, err)
	defer lf.Close()
	cmd.Stdout, cmd.Stderr = lf, lf
	start := time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// serve stops in a user namespace too (a reader of the sandbox's
		// netlink once kept it from ever returning there).
		exec.Command(e.bin, "stop", "--harness-dir", harness).Run()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			log, _ := os.ReadFile(logs)
			t.Errorf("serve in the user namespace did not stop within 30 s of sandboxd stop; its log:\n%s", log)
		}
	})
	var status []byte
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if status, err = exec.Command(e.bin, "status", "--harness-dir", harness).Output(); err == nil {
			break
		}
		log, _ := os.ReadFile(logs)
		select {
		case err := <-exited:
			t.Fatalf("serve in the user namespace exited (%v); its log:\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve in the user namespace never answered; its log:\n%s", log)
		}
	}
	figure("hostUsers: false emulated: serve --host in a user namespace of %d ids ready in %.2fs", size, time.Since(start).Seconds())
	var st struct {
		Sandbox struct {
			IDMap  string `json:"id_map"`
			UIDMap string `json:"uid_map"`
			GIDMap string `json:"gid_map"`
		} `json:"sandbox"`
		Degradations []string `json:"degradations"`
		SSH          struct {
			Listen string `json:"listen"`
		} `json:"ssh"`
	}
	require.NoError(t, json.Unmarshal(status, &st), "%s", status)
	assert.Equal(t, "identity", st.Sandbox.IDMap, "every id of the namespace, each for itself: no degradation")
	assert.Equal(t, "0 0 65536", st.Sandbox.UIDMap, "status states the 65,536-id map")
	assert.Equal(t, "0 0 65536", st.Sandbox.GIDMap)
	assert.Empty(t, st.Degradations)

	_, port, _ := strings.Cut(st.SSH.Listen, "127.0.0.1:")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-i", e.privKey, "-p", port, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "agent@127.0.0.1",
		"id -u; cat /proc/self/uid_map; stat -c %u /etc/passwd; touch "+probe).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 3, "%s", out)
	assert.Equal(t, "0", lines[0], "the agent is root of the sandbox")
	assert.Equal(t, []string{"0", "0", "65536"}, strings.Fields(lines[1]), "65,536 ids inside, not the host's 4,294,967,295")
	assert.Equal(t, "65534", lines[2], "the host's root-owned files are unmapped here (a Pod's root filesystem is id-mapped instead)")
	var fi syscall.Stat_t
	require.NoError(t, syscall.Stat(probe, &fi))
	assert.Equal(t, uint32(base), fi.Uid, "the agent's root is host uid %d, not the host's root", base)
	figure("hostUsers: false emulated: session uid_map %q, host root's files as uid %s, the agent's files on the host as uid %d", strings.Join(strings.Fields(lines[1]), " "), lines[2], fi.Uid)
}

// podCost reports sandboxd's own cost in the Pod's container: the RSS of
// serve (the container's pid 1) and of bwrap's holder at idle and with 10
// SSH sessions open, and serve's CPU time over 10 s of idling.
func (e *env) podCost(t *testing.T, ctx context.Context, id, ip string) {
	t.Helper()
	rss := func() string {
		return strings.TrimSpace(docker(t, "exec", id, "sh", "-c",
			`for p in /proc/[0-9]*; do case "$(cat $p/comm)" in sandboxd|bwrap) printf '%s=%s ' "$(cat $p/comm)" "$(awk '/VmRSS/{print $2}' $p/status)";; esac; done`))
	}
	ticks := func() int {
		n, err := strconv.Atoi(strings.TrimSpace(docker(t, "exec", id, "awk", "{print $14+$15}", "/proc/1/stat")))
		require.NoError(t, err)
		return n
	}
	time.Sleep(2 * time.Second)
	idle := rss()
	t0 := ticks()
	time.Sleep(10 * time.Second)
	cpu := ticks() - t0
	done := make(chan error, 10)
	for range 10 {
		go func() {
			_, err := e.sshRun(ctx, ip, "sleep 8", "")
			done <- err
		}()
	}
	time.Sleep(4 * time.Second)
	busy := rss()
	for range 10 {
		require.NoError(t, <-done)
	}
	figure("kubernetes pod under docker: RSS KiB idle %s; with 10 SSH sessions %s; serve's CPU at idle %d clock ticks (1/100 s) in 10 s", idle, busy, cpu)
}
