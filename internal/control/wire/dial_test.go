package wire

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fullListener listens at the control socket of a new harness dir with a
// queue of one, and fills it: the next connect(2) finds no room until the
// returned accept takes the connection that holds it.
func fullListener(t *testing.T) (harnessDir string, accept func() *Conn) {
	harnessDir = t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(harnessDir, "run"), 0o700))
	lfd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(lfd) })
	require.NoError(t, syscall.Bind(lfd, &syscall.SockaddrUnix{Name: Socket(harnessDir)}))
	require.NoError(t, syscall.Listen(lfd, 0))
	holder, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(holder) })
	require.NoError(t, syscall.Connect(holder, &syscall.SockaddrUnix{Name: Socket(harnessDir)}))
	probe, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	require.NoError(t, err)
	defer syscall.Close(probe)
	require.ErrorIs(t, syscall.Connect(probe, &syscall.SockaddrUnix{Name: Socket(harnessDir)}), syscall.EAGAIN, "the queue should be full")
	return harnessDir, func() *Conn {
		fd, _, err := syscall.Accept(lfd)
		require.NoError(t, err)
		// Pollable, so that a read the test waits for fails it in time
		// rather than hang it.
		require.NoError(t, syscall.SetNonblock(fd, true))
		f := os.NewFile(uintptr(fd), "accepted")
		t.Cleanup(func() { f.Close() })
		require.NoError(t, f.SetReadDeadline(time.Now().Add(30*time.Second)))
		return NewConn(f)
	}
}

// On a full listen queue Dial waits for room, and a signal or the end of
// its context ends the wait: a connect(2) that blocked could be ended by
// neither, and `sandboxd exec` would ignore SIGTERM until the daemon
// caught up.
func TestDialWaitsForRoomAndEndsOnASignal(t *testing.T) {
	t.Run("signal", func(t *testing.T) {
		dir, _ := fullListener(t)
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		_, _, err := Dial(context.Background(), dir, []byte(`{}`), sigs)
		require.Error(t, err)
		assert.Equal(t, "ended by SIGTERM while waiting for the daemon, whose queue is full: the command never started", err.Error())
	})
	t.Run("context", func(t *testing.T) {
		dir, _ := fullListener(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err := Dial(ctx, dir, []byte(`{}`), nil)
		require.Error(t, err)
		assert.Equal(t, "ended by a signal while waiting for the daemon, whose queue is full: the command never started", err.Error())
	})
	t.Run("passed on", func(t *testing.T) {
		// A signal the command gets waits with the request, and goes after
		// it; a closed channel is no signal.
		dir, accept := fullListener(t)
		sigs := make(chan os.Signal, 2)
		sigs <- syscall.SIGUSR1
		sigs <- syscall.SIGHUP
		close(sigs)
		done := make(chan error, 1)
		go func() {
			_, _, err := Dial(context.Background(), dir, []byte(`{"op":"exec"}`), sigs)
			done <- err
		}()
		// Dial reads the signals only while it waits: room made before
		// would leave them to the session.
		require.Eventually(t, func() bool { return len(sigs) == 0 }, 30*time.Second, time.Millisecond)
		accept()
		require.NoError(t, waitFor(t, done))
		c := accept()
		for _, want := range []string{`{"op":"exec"}`, "USR1", "HUP"} {
			_, payload, err := c.Read()
			require.NoError(t, err)
			assert.Equal(t, want, string(payload))
		}
	})
	t.Run("room", func(t *testing.T) {
		dir, accept := fullListener(t)
		type dialed struct {
			c   *Conn
			err error
		}
		done := make(chan dialed, 1)
		go func() {
			c, _, err := Dial(context.Background(), dir, []byte(`{"op":"status"}`), nil)
			done <- dialed{c, err}
		}()
		accept() // the connection that held the queue: room for Dial's
		d := waitFor(t, done)
		require.NoError(t, d.err)
		kind, payload, err := accept().Read()
		require.NoError(t, err)
		assert.Equal(t, KindJSON, kind)
		assert.Equal(t, `{"op":"status"}`, string(payload))
	})
}

// waitFor is the value from ch, failing the test rather than hanging it.
func waitFor[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("Dial still waits with room in the queue")
		panic("unreachable")
	}
}
