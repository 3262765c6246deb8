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
