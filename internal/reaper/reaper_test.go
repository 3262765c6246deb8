package reaper

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/procfs"
)

// The reaper takes the children that nothing waits for, PID 1 or not, and
// never one whose waiter has yet to call Wait, however long after its exit:
// that would be a session's exit status stolen
// (docs/failures.md#reaper-never-takes-a-session-exit-status).
func TestReaperTakesOnlyChildrenNothingWaitsFor(t *testing.T) {
	stop := Start(slog.New(slog.DiscardHandler))
	defer stop()
	// No os.Process for this one: nothing will wait for it.
	stray, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
	require.NoError(t, err)
	late := exec.Command("/bin/sh", "-c", "exit 7")
	require.NoError(t, late.Start())
	_, pidfds := pidfdsHeld()

	require.Eventually(t, func() bool {
		st, err := procfs.ReadStat(stray)
		return err != nil || st.PPID != os.Getpid()
	}, 10*time.Second, 20*time.Millisecond, "the child nothing waits for is still there")

	time.Sleep(3 * zombieGrace)
	err = late.Wait()
	if !pidfds {
		// Go waits by pid here, so the reaper has only the grace to go by.
		t.Logf("no pidfds in this process: the late waiter got %v", err)
		return
	}
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the late waiter lost its child: %v", err)
	assert.Equal(t, 7, ee.ExitCode())
}
