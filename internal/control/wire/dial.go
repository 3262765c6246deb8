package wire

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// Dial connects to the daemon behind a harness dir and sends request, a
// JSON document, as the connection's first frame. The connection is a
// socket of its own, without package net: io.Closer ends it. While the
// daemon's listen queue is full Dial waits, until the end of ctx or a
// signal on signals (nil: none), which end it: the command never started.
func Dial(ctx context.Context, harnessDir string, request []byte, signals <-chan os.Signal) (*Conn, io.Closer, error) {
	path := Socket(harnessDir)
	// Non-blocking from the start: the runtime's poller serves its reads,
	// a Close ends one that waits, and a full queue is EAGAIN to wait on
	// here rather than a connect(2) no signal can end.
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, errors.New("connect to " + path + ": " + err.Error())
	}
	if err := connect(ctx, fd, path, signals); err != nil {
		syscall.Close(fd)
		var ended *endedWaiting
		switch {
		case errors.As(err, &ended), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return nil, nil, err
		case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
			return nil, nil, &noDaemon{path}
		case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
			return nil, nil, errors.New("connect to " + path + ": " + err.Error() + ": the control socket is root's; run as root")
		}
		return nil, nil, errors.New("connect to " + path + ": " + err.Error())
	}
	f := os.NewFile(uintptr(fd), path)
	conn := NewConn(f)
	if err := conn.Write(KindJSON, request); err != nil {
		f.Close()
		return nil, nil, errors.New("send the request: " + err.Error())
	}
	return conn, f, nil
}

// A Unix socket's connect(2) completes at once or, on a full listen queue,
// fails with EAGAIN; nothing announces room in the queue, so the wait is
// a retry that backs off from a millisecond to 50.
func connect(ctx context.Context, fd int, path string, signals <-chan os.Signal) error {
	addr := &syscall.SockaddrUnix{Name: path}
	backoff := time.Millisecond
	for {
		err := syscall.Connect(fd, addr)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			return err
		}
		wait := time.NewTimer(backoff)
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		case sig := <-signals:
			wait.Stop()
			return &endedWaiting{sig}
		}
		if backoff < 50*time.Millisecond {
			backoff *= 2
		}
	}
}

// endedWaiting is a signal that came while the daemon's queue was full.
type endedWaiting struct{ signal os.Signal }

func (e *endedWaiting) Error() string {
	return "ended by " + signalDisplayName(e.signal) + " while waiting for the daemon, whose queue is full: the command never started"
}

// noDaemon is ErrNoDaemon at a path, with what to do.
type noDaemon struct{ path string }

func (e *noDaemon) Error() string {
	return ErrNoDaemon.Error() + " at " + e.path + ": start it with `sandboxd serve`, or point --harness-dir (or SANDBOXD_HARNESS_DIR) at the harness dir of the one that runs"
}

func (e *noDaemon) Unwrap() error { return ErrNoDaemon }
