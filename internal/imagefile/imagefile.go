// Package imagefile is the one way anything in the daemon reads the image's
// files (/etc/passwd, /etc/group, /etc/hosts, …) and looks at its programs.
// They lie in a filesystem the agent's root can write, and between any two
// system calls of the daemon it can rename, replace or swap them, or plant a
// FIFO (whose open waits for a writer forever), a link to an endless device
// (/dev/urandom), a huge file, or a magic link into the daemon's own
// descriptors. So a name is resolved under a root held open — symlinks stay
// inside it, magic links are refused — and opened without blocking and
// without ever becoming a controlling terminal; only a regular file is read,
// and only so much of it; a program is looked at without being opened.
//
// Two roots are used: the daemon's own / for the snapshots it takes at start,
// before any agent code runs ([Lines], [Hosts]), and /proc/<holder>/root for
// the sandbox's own view at any later time ([OpenRoot]).
package imagefile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is the answer for a name that is there but is no regular
// file: a FIFO, a device, a socket or a directory is never read.
var ErrNotRegular = errors.New("not a regular file")

// Root is a directory held open (O_PATH) that names are resolved under, as a
// process whose root it is would resolve them.
type Root struct {
	fd      int
	dir     string
	resolve uint64 // openat2's resolve flags for every name under the root
}

// OpenRoot holds dir as a root: "/" for the daemon's own view,
// /proc/<holder>/root for the sandbox's.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, err)
	}
	return &Root{fd: fd, dir: dir, resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}, nil
}

// Beneath holds a copy of dirfd (dir names it in messages) as a root under
// which no symlink is followed at all and nothing is reached outside it:
// for a directory whose every entry the agent's code may have made, such as
// the verdict directory the verifier writes, where no link of its has a
// meaning worth following.
func Beneath(dirfd int, dir string) (*Root, error) {
	fd, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", dir, err)
	}
	return &Root{fd: fd, dir: dir, resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}, nil
}

// Fd is the root's descriptor, for other opens that must resolve under it
// (the sandbox's ptmx); it stays the Root's, and Close closes it.
func (r *Root) Fd() int { return r.fd }

// Close releases the root.
func (r *Root) Close() error { return unix.Close(r.fd) }

// maxRetries bounds the retries of an open that the kernel could not
// complete safely (EAGAIN: a rename raced a ".." under RESOLVE_IN_ROOT) or
// that a signal interrupted: the agent can make such races, not make them
// last.
const maxRetries = 16

// openat opens name under r: RESOLVE_IN_ROOT keeps every symlink (and "..")
// inside the root, RESOLVE_NO_MAGICLINKS refuses /proc/*/fd/N and the like
// (a Beneath root follows no symlink at all).
func (r *Root) openat(name string, flags int) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: r.resolve,
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(r.fd, name, how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < maxRetries {
			continue
		}
		return fd, err
	}
}

// open opens name under r for reading if it is a regular file. O_NONBLOCK
// makes the open of a FIFO return at once (reads of a regular file ignore
// it), O_NOCTTY keeps a terminal from becoming the daemon's.
func (r *Root) open(name string) (*os.File, error) {
	fd, err := r.openat(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: r.path(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: r.path(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "read", Path: r.path(name), Err: ErrNotRegular}
	}
	return os.NewFile(uintptr(fd), r.path(name)), nil
}

// path names name under r for messages.
func (r *Root) path(name string) string {
	return filepath.Join(r.dir, name)
}

// ErrTooLarge is the answer for a regular file larger than the caller's
// limit, which [Root.ReadFile] does not cut short.
var ErrTooLarge = errors.New("larger than the limit")

// ReadFile reads the whole regular file name under r if it holds at most
// limit bytes, also when it grows while being read; a larger one is
// ErrTooLarge.
func (r *Root) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := r.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if int64(len(b)) > limit {
		return nil, &os.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("%w of %d bytes", ErrTooLarge, limit)}
	}
	return b, nil
}

// Lines calls fn with each line of the regular file name under r, reading
// at most limit bytes. A missing file has no lines (an image may lack
// /etc/passwd, as Docker allows); anything else that is not a regular file
// is an error.
func (r *Root) Lines(name string, limit int64, fn func(line string)) error {
	f, err := r.open(name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, limit))
	for sc.Scan() {
		fn(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return nil
}

// Hosts reads a hosts file under r (at most limit bytes): each name, in
// lower case and without a trailing dot, with its addresses in the file's
// order. A missing file names nothing.
func (r *Root) Hosts(name string, limit int64) (map[string][]netip.Addr, error) {
	hosts := map[string][]netip.Addr{}
	err := r.Lines(name, limit, func(line string) {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			return
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			return
		}
		for _, n := range f[1:] {
			n = strings.ToLower(strings.TrimSuffix(n, "."))
			hosts[n] = append(hosts[n], a.Unmap())
		}
	})
	return hosts, err
}

// Executable reports whether name under r is a regular file with an execute
// bit. It opens only a path descriptor (O_PATH), which reads nothing and
// cannot block, whatever is there.
func (r *Root) Executable(name string) bool {
	fd, err := r.openat(name, unix.O_PATH)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0
}

// Lines is [Root.Lines] under the daemon's own /, for the snapshots taken at
// start. Symlinks are followed inside / as the image meant them
// (/etc/resolv.conf is one on many hosts); magic links are not.
func Lines(path string, limit int64, fn func(line string)) error {
	return underSlash(func(r *Root) error { return r.Lines(path, limit, fn) })
}

// Hosts is [Root.Hosts] under the daemon's own /, for the snapshots taken at
// start.
func Hosts(path string, limit int64) (hosts map[string][]netip.Addr, err error) {
	err = underSlash(func(r *Root) error {
		hosts, err = r.Hosts(path, limit)
		return err
	})
	return hosts, err
}

// ReadFile is [Root.ReadFile] under the daemon's own /.
func ReadFile(path string, limit int64) (b []byte, err error) {
	err = underSlash(func(r *Root) error {
		b, err = r.ReadFile(path, limit)
		return err
	})
	return b, err
}

func underSlash(fn func(*Root) error) error {
	r, err := OpenRoot("/")
	if err != nil {
		return err
	}
	defer r.Close()
	return fn(r)
}
