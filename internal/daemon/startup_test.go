package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// A start-up failure after the sandbox exists ends serve at once, through
// the same ordered shutdown as a stop: the egress listeners made before the
// one that failed are closed, and nothing of the sandbox is left. (The
// other start-up failures are in test/faults, against the real binary.)
func TestEgressListenerFailureEndsServeAndLeavesNothing(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	harness := sandboxtest.HarnessDir(t)
	cfg := config.Config{HarnessDir: harness, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := start(ctx, cfg)
	require.NoError(t, err)
	holder := d.holder.PID
	pidNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", holder))
	require.NotEmpty(t, pidNS)

	// Something already listens on the visitor proxy's port inside the
	// sandbox when serve makes its listeners.
	taken := netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", egress.VisitorProxyPort))
	lns, errs, err := d.target.Listen(ctx, []netip.AddrPort{taken})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	defer lns[0].Close()

	began := time.Now()
	served := make(chan error, 1)
	go func() { served <- d.serve(ctx) }()
	select {
	case err = <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("serve kept running after its egress listeners failed")
	}
	took := time.Since(began)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("listen on %s inside the sandbox", taken))
	assert.Less(t, took, 2*time.Second, "serve took %s to fail", took)

	assert.Empty(t, inPIDNamespace(pidNS), "processes of the sandbox survived")
	assert.True(t, gone(holder), "the holder is gone")
	_, err = os.Stat(control.Socket(harness))
	assert.True(t, os.IsNotExist(err), "a control socket was left")
	// The lock is free: the next serve on the same harness dir starts.
	s := serveForTest(t, config.Config{HarnessDir: harness})
	assert.Equal(t, 0, s.sh(t, "true").exit.Code)
}

// inPIDNamespace lists the live processes in the pid namespace ns.
func inPIDNamespace(ns string) []int {
	var out []int
	for _, pid := range procfs.PIDs() {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); l == ns && !gone(pid) {
			out = append(out, pid)
		}
	}
	return out
}
