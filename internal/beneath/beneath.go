// Package beneath opens paths the way anything that runs as root beside the
// agent must: one component at a time, never following a symlink, beneath a
// directory descriptor. The shared filesystem belongs to the agent, and a
// root agent can swap, rename or replace any name in it between two system
// calls: a planted symlink must never turn an open, a chown, a mount or a
// read by root into one on another file.
package beneath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenDir opens the directory abs, following no symlink in any component.
// flags are added to O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC (O_PATH for a
// descriptor that only anchors *at calls, O_RDONLY to read or lock it).
func OpenDir(abs string, flags int) (int, error) {
	if !path.IsAbs(abs) {
		return -1, fmt.Errorf("open %s: path must be absolute", abs)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	parts := strings.Split(strings.Trim(path.Clean(abs), "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	for i, p := range parts {
		fl := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			fl = unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | flags
		}
		next, err := unix.Openat(fd, p, fl, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", "/"+path.Join(parts[:i+1]...), NoFollowErr(err))
		}
		fd = next
	}
	if len(parts) == 0 && flags&unix.O_PATH == 0 {
		next, err := unix.Open("/", unix.O_DIRECTORY|unix.O_CLOEXEC|flags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open /: %w", err)
		}
		fd = next
	}
	return fd, nil
}

// Open opens the relative path rel beneath dirfd, following no symlink and
// never leaving dirfd. flags are added to O_NOFOLLOW|O_CLOEXEC.
func Open(dirfd int, rel string, flags int) (int, error) {
	return unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// ErrNotDirectory marks a path where a directory must be but something else
// is: in the shared filesystem, something the agent put there.
var ErrNotDirectory = errors.New("a symlink or a file where a directory must be")

// NoFollowErr explains the errors O_NOFOLLOW|O_DIRECTORY give for a symlink.
func NoFollowErr(err error) error {
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return fmt.Errorf("%w (%w)", err, ErrNotDirectory)
	}
	return err
}

// ReadDirNamesAtMost lists at most max entries of the directory open at
// dirfd, sorted, reading it a chunk at a time: a directory of millions of
// entries the agent made costs no more than max names.
func ReadDirNamesAtMost(dirfd int, max int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	var names []string
	for len(names) < max {
		chunk, err := f.Readdirnames(min(1024, max-len(names)))
		names = append(names, chunk...)
		if err == io.EOF {
			break
		}
		if err != nil {
			sort.Strings(names)
			return names, err
		}
	}
	sort.Strings(names)
	return names, nil
}

// ReadDirNames lists the directory open at dirfd, sorted.
func ReadDirNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// FDPath names the descriptor fd for a call that takes a path, such as
// mount(2): the kernel resolves it to what fd is open on, not to a name.
func FDPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }
