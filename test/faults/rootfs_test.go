package faults

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// The review's attack, in a container as sandboxd runs in production: a
// root agent replaces the image's /usr/bin/bwrap with a wrapper that
// records who ran it and copies the harness's keys, then the operator runs
// `docker exec CTR sandboxd doctor`, and later a second serve starts on
// the same root filesystem (as after docker restart). Neither may run the
// wrapper as the container's root: doctor exits 3 beside the live serve
// and after it, the second serve exits 125. --reuse-rootfs, the unsafe
// override, does run it: the attack is real
// (docs/failures.md#a-used-root-filesystem-runs-nothing-as-root).
func TestReplacedBwrapNeverRunsAsContainerRoot(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		if sandboxtest.Strict() {
			t.Fatal("docker is needed: run scripts/deps.sh test")
		}
		t.Skip("needs docker")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	tag, err := exec.Command(filepath.Join(root, "images/base.sh"), "bookworm", "--with-sandbox-tools").Output()
	require.NoError(t, err, "images/base.sh bookworm --with-sandbox-tools")
	image := strings.TrimSpace(string(tag))
	bin := sandboxd(t)

	name := "sandboxd-rootfs-" + randomHex(4)
	docker := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !assert.ErrorAs(t, err, &ee, "docker %v: %s", args, b) {
			return string(b), -1
		}
		if ee != nil {
			return string(b), ee.ExitCode()
		}
		return string(b), 0
	}
	// serve is not the container's PID 1 here, so that it can end and
	// start again on the same root filesystem, as docker restart does.
	_, started := docker("run", "-d", "--name", name, "--network", "none",
		"--security-opt", "seccomp="+filepath.Join(root, "images/seccomp.json"),
		"--security-opt", "systempaths=unconfined",
		"--security-opt", "apparmor=unconfined",
		"-v", bin+":/opt/sandboxd/sandboxd:ro",
		image, "sleep", "infinity")
	require.Equal(t, 0, started)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	sandboxd := func(args ...string) (string, int) {
		return docker(append([]string{"exec", name, "/opt/sandboxd/sandboxd"}, args...)...)
	}
	serve := func(args ...string) {
		t.Helper()
		_, code := docker(append([]string{"exec", "-d", name, "/opt/sandboxd/sandboxd", "serve"}, args...)...)
		require.Equal(t, 0, code)
		require.Eventually(t, func() bool { _, code := sandboxd("status"); return code == 0 }, 60*time.Second, 100*time.Millisecond, "serve did not answer")
	}
	stolen := func() string {
		out, _ := docker("exec", name, "sh", "-c", "cat /var/tmp/stolen.* 2>/dev/null")
		return out
	}

	serve()
	attack := `cp /usr/bin/bwrap /usr/bin/bwrap.real &&
printf '#!/bin/sh\n{ id -u; cat /media/sandboxd/keys/* 2>&1; } > /var/tmp/stolen.$$\nexec /usr/bin/bwrap.real "$@"\n' > /usr/bin/bwrap.new &&
chmod 755 /usr/bin/bwrap.new && mv /usr/bin/bwrap.new /usr/bin/bwrap && id -u`
	out, code := sandboxd("exec", "--", "sh", "-c", attack)
	require.Equal(t, 0, code, out)
	require.Equal(t, "0\n", out, "the agent is root")
	out, _ = docker("exec", name, "head", "-c", "200", "/usr/bin/bwrap")
	require.Contains(t, out, "bwrap.real", "the container's /usr/bin/bwrap is the agent's wrapper")

	out, code = sandboxd("doctor")
	assert.Equal(t, 3, code, out)
	assert.Contains(t, out, "another sandboxd serve owns this harness dir")
	assert.Contains(t, out, "the serve that runs here (sandboxd status) has its sandbox")
	assert.Empty(t, stolen(), "doctor ran the agent's bwrap beside the serve")

	_, code = sandboxd("stop")
	require.Equal(t, 0, code)
	require.Eventually(t, func() bool {
		out, code = sandboxd("doctor")
		return strings.Contains(out, "this root filesystem has already been an agent's")
	}, 30*time.Second, 100*time.Millisecond, "doctor after serve: %s", out)
	assert.Equal(t, 3, code, out)
	out, code = sandboxd("serve", "--listen", "")
	assert.Equal(t, 125, code, out)
	assert.Contains(t, out, "Start a fresh container from the image")
	assert.Empty(t, stolen(), "a refused doctor or serve ran the agent's bwrap")

	// The unsafe override runs it, as root, with the keys in reach.
	serve("--reuse-rootfs")
	got := stolen()
	assert.True(t, strings.HasPrefix(got, "0\n"), "the wrapper ran as root: %q", got)
	assert.Contains(t, got, "PRIVATE KEY")
	out, _ = sandboxd("status")
	assert.Contains(t, out, "root filesystem reused (--reuse-rootfs)")
}
