package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// sandboxd doctor, run in a container under each profile with the other
// documented options: under images/seccomp.json no warning for the calls the
// engine knows, under the profile derived from Docker 20.10's default a
// warning that names them; serve would start under both.
func TestDoctorUnderEachProfile(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil || exec.Command("docker", "info").Run() != nil {
		sandboxtest.Need(t, "a docker CLI and engine it may use: this test runs sandboxd doctor in Docker containers")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(root, "images/base.sh"), "bookworm", "--with-sandbox-tools").Output()
	require.NoError(t, err, "images/base.sh bookworm --with-sandbox-tools")
	image := strings.TrimSpace(string(out))

	bin := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, "sandboxd"), "./cmd/sandboxd")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/sandboxd: %s", b)

	type check struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Warn   bool   `json:"warn"`
		Detail string `json:"detail"`
		Fix    string `json:"fix"`
	}
	doctor := func(t *testing.T, profile string) check {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none",
			"--security-opt", "seccomp="+profile,
			"--security-opt", "systempaths=unconfined",
			"--security-opt", "apparmor=unconfined",
			"-v", bin+":/opt/sandboxd:ro", image, "/opt/sandboxd/sandboxd", "doctor", "--json")
		out, err := cmd.Output()
		var report struct {
			OK     bool    `json:"ok"`
			Checks []check `json:"checks"`
		}
		require.NoError(t, json.Unmarshal(out, &report), "doctor --json (%v): %s", err, out)
		assert.NoError(t, err, "doctor exits 0: a warning does not stop serve")
		assert.True(t, report.OK, "%s", out)
		for _, c := range report.Checks {
			if c.Name == "current syscalls (seccomp)" {
				t.Logf("%+v", c)
				assert.True(t, c.OK, "a warning, never a failure")
				return c
			}
		}
		t.Fatalf("doctor has no check of the current syscalls: %s", out)
		return check{}
	}
	kernel := kernelRelease(t)

	t.Run("current", func(t *testing.T) {
		c := doctor(t, filepath.Join(root, "images/seccomp.json"))
		assert.False(t, c.Warn, "%s", c.Detail)
		if atLeast(kernel, 6, 7) {
			assert.Contains(t, c.Detail, "fchmodat2, cachestat, futex_waitv, futex_wake allowed")
		}
	})
	t.Run("docker-20.10", func(t *testing.T) {
		c := doctor(t, filepath.Join(root, "images/seccompgen/testdata/seccomp-docker-20.10.json"))
		if !atLeast(kernel, 6, 7) {
			t.Skipf("kernel %d.%d lacks futex_wake: the old profile's gap is not visible here", kernel[0], kernel[1])
		}
		assert.True(t, c.Warn, "%s", c.Detail)
		assert.Contains(t, c.Detail, "fchmodat2 → ")
		assert.Contains(t, c.Detail, "futex_wake → ")
		assert.NotContains(t, c.Detail, "futex_waitv → ", "Debian's Docker 20.10 profile has futex_waitv")
		assert.Contains(t, c.Fix, "older seccomp profile")
	})
}

func kernelRelease(t *testing.T) [2]int {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	require.NoError(t, err)
	var k [2]int
	_, err = fmt.Sscanf(string(b), "%d.%d", &k[0], &k[1])
	require.NoError(t, err)
	return k
}

func atLeast(k [2]int, major, minor int) bool {
	return k[0] > major || k[0] == major && k[1] >= minor
}
