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
// daemon's listen queue is full Dial waits; the end of ctx, or a signal on
// signals (nil: none) that ends a session (see Streams.Signal), ends the
// wait, and the command never starts. A signal that is passed on is sent
// after the request, for the command once it runs.
func Dial(ctx context.Context, harnessDir string, request []byte, signals <-chan os.Signal) (*Conn, io.Closer, error) {
	path := Socket(harnessDir)
	// Non-blocking from the start: the runtime's poller serves its reads,
	// a Close ends one that waits, and a full queue is EAGAIN to wait on
	// here rather than a connect(2) no signal can end.
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, errors.New("connect to " + path + ": " + err.Error())
	}
	held, err := connect(ctx, fd, path, signals)
	if err != nil {
		syscall.Close(fd)
		var ended *endedWaiting
		switch {
		case errors.As(err, &ended):
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
	for _, sig := range held {
		if err := conn.Write(KindSignal, []byte(signalName(sig))); err != nil {
			f.Close()
			return nil, nil, errors.New("send the request: " + err.Error())
		}
	}
	return conn, f, nil
}

// A Unix socket's connect(2) completes at once or, on a full listen queue,
// fails with EAGAIN; nothing announces room in the queue, so the wait is
// a retry that backs off from a millisecond to 50. It returns the signals
// to pass on that came meanwhile.
func connect(ctx context.Context, fd int, path string, signals <-chan os.Signal) (held []os.Signal, err error) {
	addr := &syscall.SockaddrUnix{Name: path}
	backoff := time.Millisecond
	for {
		err := syscall.Connect(fd, addr)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			return held, err
		}
		wait := time.NewTimer(backoff)
	waiting:
		for {
			select {
			case <-wait.C:
				break waiting
			case <-ctx.Done():
				wait.Stop()
				return nil, &endedWaiting{}
			case sig, ok := <-signals:
				switch {
				case !ok:
					signals = nil // closed: no more signals
				case signalName(sig) != "":
					held = append(held, sig)
				default:
					wait.Stop()
					return nil, &endedWaiting{signal: sig}
				}
			}
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// endedWaiting is a wait for room in the daemon's queue that a signal or
// (signal nil) the end of a context ended.
type endedWaiting struct{ signal os.Signal }

func (e *endedWaiting) Error() string {
	by := "a signal"
	if e.signal != nil {
		by = signalDisplayName(e.signal)
	}
	return "ended by " + by + " while waiting for the daemon, whose queue is full: the command never started"
}

// noDaemon is ErrNoDaemon at a path, with what to do.
type noDaemon struct{ path string }

func (e *noDaemon) Error() string {
	return ErrNoDaemon.Error() + " at " + e.path + ": start it with `sandboxd serve`, or point --harness-dir (or SANDBOXD_HARNESS_DIR) at the harness dir of the one that runs"
}

func (e *noDaemon) Unwrap() error { return ErrNoDaemon }
