package reaper

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
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

// Zombies finds this process's exited children that nothing has waited for,
// whichever thread made them, also when that thread has exited since (its
// children pass to another thread), and nothing else: not a child still
// running, not one already waited for.
func TestZombiesAreOwnExitedChildrenOfEveryThread(t *testing.T) {
	// No reaper runs here: the zombies stay until this test waits for them.
	fork := func(argv ...string) int {
		pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{})
		require.NoError(t, err)
		return pid
	}
	reap := func(pid int) {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
	exited := fork("/bin/true")
	defer reap(exited)
	running := fork("/bin/sleep", "60")
	defer reap(running)
	defer syscall.Kill(running, syscall.SIGKILL)
	waited := fork("/bin/true")
	reap(waited)
	// Made by a thread that exits with its goroutine (locked, never
	// unlocked), so the child passes to another thread of this process.
	orphaned := make(chan int)
	go func() {
		runtime.LockOSThread()
		orphaned <- fork("/bin/true")
	}()
	fromGone := <-orphaned
	defer reap(fromGone)

	require.Eventually(t, func() bool {
		z := Zombies()
		_, a := z[exited]
		_, b := z[fromGone]
		return a && b
	}, 10*time.Second, 20*time.Millisecond, "both exited children are zombies of this process")
	z := Zombies()
	assert.NotContains(t, z, running, "a running child is no zombie")
	assert.NotContains(t, z, waited, "a child waited for is gone")
	for pid, st := range z {
		assert.Equal(t, os.Getpid(), st.PPID, "pid %d", pid)
		assert.Equal(t, byte('Z'), st.State, "pid %d", pid)
	}
}

// Without a child that has exited, Zombies reads no process at all, and
// says so by finding none.
func TestZombiesWithNoExitedChild(t *testing.T) {
	running, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{})
	require.NoError(t, err)
	defer func() {
		syscall.Kill(running, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(running, &ws, 0, nil)
	}()
	assert.False(t, anyExited(), "only a running child")
	assert.Empty(t, Zombies())
}

// A child that its waiter reaps, as every session's command is, costs the
// reaper no look at every thread's children: its look comes lookDelay after
// the SIGCHLD, when the waiter has reaped it. A look at once raced the
// waiter on every exec; here the waiter takes a few milliseconds, which a
// look at once always loses to.
func TestAWaitedChildCostsTheReaperNoLook(t *testing.T) {
	stop := Start(slog.New(slog.DiscardHandler))
	defer stop()
	before := childrenListed.Load()
	const runs = 20
	for range runs {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		require.NoError(t, err)
		time.Sleep(3 * time.Millisecond) // the exit, and a waiter that is slow, yet well within lookDelay
		var ws syscall.WaitStatus
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		require.NoError(t, err)
		time.Sleep(lookGap + 20*time.Millisecond) // each exit a burst of its own
	}
	// A waiter held up past lookDelay by a loaded machine costs one look;
	// a look at once costs one per child.
	assert.Less(t, childrenListed.Load()-before, int64(runs/4), "looks that read every thread's children file, for %d waited children", runs)
}
