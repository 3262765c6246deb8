// Package memfd makes anonymous in-memory files: how sandboxd hands data to a
// child process (bwrap's argument list and data binds, a joined process's
// spec, a visitor's parameters) without writing it to any filesystem or
// showing it on a command line.
package memfd

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// New is an anonymous file holding data, positioned at its start and closed
// on exec (a child gets it only through ExtraFiles).
func New(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("fill memfd %s: %w", name, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind memfd %s: %w", name, err)
	}
	return f, nil
}

// Sealed is an anonymous executable copy of src that nobody can change once
// it is made: its size and contents are sealed. It is closed on exec.
func Sealed(name string, src io.Reader) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if err == unix.EINVAL { // kernels before 6.3 know no MFD_EXEC and allow exec anyway
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("fill memfd %s: %w", name, err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal memfd %s: %w", name, err)
	}
	return f, nil
}
