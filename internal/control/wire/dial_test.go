package wire

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
		f := os.NewFile(uintptr(fd), "accepted")
		t.Cleanup(func() { f.Close() })
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
		require.ErrorIs(t, err, context.Canceled)
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
		d := <-done
		require.NoError(t, d.err)
		kind, payload, err := accept().Read()
		require.NoError(t, err)
		assert.Equal(t, KindJSON, kind)
		assert.Equal(t, `{"op":"status"}`, string(payload))
	})
}
