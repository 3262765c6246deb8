package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/harness"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// stopServed stops s and waits for its serve to end.
func stopServed(t *testing.T, s *served) {
	t.Helper()
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "stop"}, nil))
	select {
	case err := <-s.done:
		require.NoError(t, err)
		s.done <- nil // for serveForTest's cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// Once a sandbox has been ready on a root filesystem, the next serve on it
// (docker restart, a restart policy, a second serve) refuses to start
// before it runs any program of it, bwrap included, and says what to do;
// --reuse-rootfs starts anyway and status says so
// (docs/failures.md#a-used-root-filesystem-runs-nothing-as-root).
func TestServeRefusesARootFilesystemAnAgentHasHad(t *testing.T) {
	s := serveForTest(t, config.Config{})
	// Written before the first session could run.
	_, err := os.Stat(filepath.Join(s.harness, harness.RootfsMarker))
	require.NoError(t, err, "the marker exists once the control socket does")
	stopServed(t, s)

	bwrap, ran := sandboxtest.RecordingBwrap(t)
	_, err = start(context.Background(), config.Config{HarnessDir: s.harness, Bwrap: bwrap, Log: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, harness.ErrRootfsUsed)
	assert.Contains(t, err.Error(), "Start a fresh container from the image")
	assert.Contains(t, err.Error(), "--reuse-rootfs")
	assert.NoFileExists(t, ran, "the refused serve ran the image's bwrap")

	again := serveForTest(t, config.Config{HarnessDir: s.harness, Bwrap: bwrap, ReuseRootfs: true})
	var st Status
	require.NoError(t, again.client.Call(context.Background(), control.Request{Op: "status"}, &st))
	require.NotEmpty(t, st.Degradations)
	assert.Contains(t, st.Degradations[len(st.Degradations)-1], "root filesystem reused (--reuse-rootfs)")
	assert.FileExists(t, ran, "--reuse-rootfs runs what the agent left")
}

// doctor holds serve's lock shared while it runs the image's bwrap: a
// serve waits for it rather than start beside it; beside a live serve, or
// once an agent has had the root filesystem, doctor is refused before it
// runs anything (docs/failures.md#a-used-root-filesystem-runs-nothing-as-root).
func TestDoctorHoldIsRefusedBesideAServeAndAfterOne(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	harnessDir := sandboxtest.HarnessDir(t)
	release, err := harness.HoldForDoctor(harnessDir)
	require.NoError(t, err, "a fresh harnessDir dir")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type begun struct {
		d   *Daemon
		err error
	}
	began := make(chan begun, 1)
	go func() {
		d, err := start(ctx, config.Config{HarnessDir: harnessDir, Log: slog.New(slog.DiscardHandler)})
		began <- begun{d, err}
	}()
	select {
	case b := <-began:
		t.Fatalf("serve started while a doctor held the harnessDir dir: %v", b.err)
	case <-time.After(500 * time.Millisecond):
	}
	release()
	var b begun
	select {
	case b = <-began:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start once the doctor was done")
	}
	require.NoError(t, b.err)
	served := make(chan error, 1)
	go func() { served <- b.d.serve(ctx) }()
	c := control.Client{HarnessDir: harnessDir}
	require.Eventually(t, func() bool { return c.Call(ctx, control.Request{Op: "status"}, nil) == nil }, 10*time.Second, 10*time.Millisecond)

	_, err = harness.HoldForDoctor(harnessDir)
	require.ErrorIs(t, err, harness.ErrLocked)
	assert.Contains(t, err.Error(), "doctor runs no program of the image")

	cancel()
	require.NoError(t, <-served)
	_, err = harness.HoldForDoctor(harnessDir)
	require.ErrorIs(t, err, harness.ErrRootfsUsed)
	assert.Contains(t, err.Error(), "run doctor in a fresh container from the image")
}
