package wire

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// Dial connects to the daemon behind a harness dir and sends request, a
// JSON document, as the connection's first frame. The connection is a
// socket of its own, without package net: io.Closer ends it.
func Dial(harnessDir string, request []byte) (*Conn, io.Closer, error) {
	path := Socket(harnessDir)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, errors.New("connect to " + path + ": " + err.Error())
	}
	// Blocking, so that a full listen queue waits rather than fails; then
	// non-blocking, so that the runtime's poller serves its reads and a
	// Close ends one that waits.
	if err := connect(fd, path); err != nil {
		syscall.Close(fd)
		switch {
		case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
			return nil, nil, &noDaemon{path}
		case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
			return nil, nil, errors.New("connect to " + path + ": " + err.Error() + ": the control socket is root's; run as root")
		}
		return nil, nil, errors.New("connect to " + path + ": " + err.Error())
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
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

func connect(fd int, path string) error {
	for {
		err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			return err
		}
	}
}

// noDaemon is ErrNoDaemon at a path, with what to do.
type noDaemon struct{ path string }

func (e *noDaemon) Error() string {
	return ErrNoDaemon.Error() + " at " + e.path + ": start it with `sandboxd serve`, or point --harness-dir (or SANDBOXD_HARNESS_DIR) at the harness dir of the one that runs"
}

func (e *noDaemon) Unwrap() error { return ErrNoDaemon }
