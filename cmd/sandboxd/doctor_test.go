package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// doctor never runs the image's bwrap beside a live serve, nor once an
// agent has had the root filesystem: it says why, prints the live serve's
// sandbox instead, and exits 3; a second serve is refused with 125 before
// it runs bwrap; --reuse-rootfs serves anyway and status says so. On a
// fresh harness dir the same doctor does run that bwrap, as root: what
// the refusals keep from happening
// (docs/failures.md#a-used-root-filesystem-runs-nothing-as-root).
func TestDoctorAndServeRunNoBwrapOfAUsedRootFilesystem(t *testing.T) {
	bwrap, ran := sandboxtest.RecordingBwrap(t)
	s := startServe(t, nil, "--host", "--listen", "")

	r := s.client(nil, "doctor", "--bwrap", bwrap)
	assert.Equal(t, exitDoctorRefused, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "doctor ran no program of the image: another sandboxd serve owns this harness dir")
	assert.Contains(t, r.stdout, "the serve that runs here (sandboxd status) has its sandbox: pid ")
	r = s.client(nil, "doctor", "--bwrap", bwrap, "--json")
	assert.Equal(t, exitDoctorRefused, r.code, r.stderr)
	var doc struct {
		OK      bool   `json:"ok"`
		Refused string `json:"refused"`
		Serve   struct {
			Sandbox struct {
				PID int `json:"pid"`
			} `json:"sandbox"`
		} `json:"serve"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
	assert.False(t, doc.OK)
	assert.NotEmpty(t, doc.Refused)
	assert.Equal(t, s.status().Sandbox.PID, doc.Serve.Sandbox.PID)
	assert.NoFileExists(t, ran, "doctor ran the image's bwrap beside a live serve")

	require.Equal(t, 0, s.client(nil, "stop").code)
	require.Eventually(t, func() bool {
		r = s.client(nil, "doctor", "--bwrap", bwrap)
		return strings.Contains(r.stdout, "this root filesystem has already been an agent's")
	}, 20*time.Second, 50*time.Millisecond, "doctor once serve is gone: %s", r.stdout)
	assert.Equal(t, exitDoctorRefused, r.code)
	assert.Contains(t, r.stdout, "run doctor in a fresh container from the image")

	env := []string{"SANDBOXD_HARNESS_DIR=" + s.harness}
	r = run(t, env, "serve", "--host", "--listen", "", "--bwrap", bwrap)
	assert.Equal(t, exitOwn, r.code, r.stderr)
	assert.Contains(t, r.stderr, "this root filesystem has already been an agent's")
	assert.Contains(t, r.stderr, "--reuse-rootfs")
	assert.NoFileExists(t, ran, "a refused serve or doctor ran the image's bwrap")

	// The control: on a harness dir no agent has had, doctor runs it.
	fresh := sandboxtest.HarnessDir(t)
	r = run(t, nil, "doctor", "--harness-dir", fresh, "--bwrap", bwrap)
	assert.Equal(t, 0, r.code, r.stdout+r.stderr)
	b, err := os.ReadFile(ran)
	require.NoError(t, err)
	assert.Contains(t, string(b), "0\n", "the replaced bwrap ran as root")
	require.NoError(t, os.Remove(ran))

	// The override, for development: it serves and says so.
	cmd := exec.Command(bin, "serve", "--host", "--listen", "", "--bwrap", bwrap, "--reuse-rootfs")
	cmd.Env = cleanEnv(env...)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		run(t, env, "stop")
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
	})
	require.Eventually(t, func() bool { return run(t, env, "status").code == 0 }, 30*time.Second, 50*time.Millisecond)
	st := run(t, env, "status")
	var reused struct {
		Degradations []string `json:"degradations"`
		Settings     map[string]struct {
			Value  any    `json:"value"`
			Source string `json:"source"`
		} `json:"settings"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &reused))
	assert.Contains(t, strings.Join(reused.Degradations, "\n"), "root filesystem reused (--reuse-rootfs)")
	assert.Equal(t, true, reused.Settings["reuse-rootfs"].Value)
	assert.Equal(t, "flag", reused.Settings["reuse-rootfs"].Source)
	assert.FileExists(t, ran, "--reuse-rootfs runs what the agent left")
}
