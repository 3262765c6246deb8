package ptyrelay

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/imagefile"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// Size is a terminal's size in characters and, optionally, pixels.
type Size struct {
	Cols, Rows       uint32
	XPixels, YPixels uint32
}

// Limits on a requested terminal size. 0×0 is accepted (OpenSSH's client
// sends it for `ssh -tt` when its own stdin is no terminal); a larger size is
// clamped, since full-screen programs allocate a cell per character and a
// 100000×100000 terminal would make tmux or vim allocate gigabytes.
const (
	MaxCols   = 4096
	MaxRows   = 2048
	maxPixels = 65535
)

// Clamp bounds s to what a terminal here may be.
func (s Size) Clamp() Size {
	s.Cols = min(s.Cols, MaxCols)
	s.Rows = min(s.Rows, MaxRows)
	s.XPixels = min(s.XPixels, maxPixels)
	s.YPixels = min(s.YPixels, maxPixels)
	return s
}

func (s Size) winsize() *unix.Winsize {
	c := s.Clamp()
	return &unix.Winsize{Row: uint16(c.Rows), Col: uint16(c.Cols), Xpixel: uint16(c.XPixels), Ypixel: uint16(c.YPixels)}
}

// pty is a pseudo-terminal of the sandbox's own devpts instance.
type pty struct {
	master *os.File // ours: nonblocking, served by the runtime poller
	slave  *os.File // the session's stdin, stdout and stderr; closed once it started
	name   string   // /dev/pts/N as the sandbox sees it
}

// openPTY allocates a pty from the sandbox's devpts, reached through the
// holder's root (docs/failures.md#ptys-come-from-the-sandbox-devpts): bwrap's
// --dev mounts a devpts instance of its own, and a pty of the substrate's instance has no name inside, so `tty`
// says "not a tty" and sudo refuses to run. The slave is owned by uid with
// the image's tty group and mode 0620, as sshd leaves it.
func openPTY(holderPID int, uid, gid uint32) (*pty, error) {
	rootPath := fmt.Sprintf("/proc/%d/root", holderPID)
	root, err := imagefile.OpenRoot(rootPath)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer root.Close()
	const ptmx = "/dev/pts/ptmx"
	mfd, err := openInRoot(root.Fd(), ptmx, unix.O_RDWR|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's %s (through %s): %w", ptmx, rootPath, err)
	}
	fail := func(err error) (*pty, error) {
		unix.Close(mfd)
		return nil, err
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlock pty from %s: %w", ptmx, err))
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail(fmt.Errorf("get pty number from %s: %w", ptmx, err))
	}
	name := "/dev/pts/" + strconv.Itoa(int(n))
	// TIOCGPTPEER opens the slave relative to the master's own devpts mount,
	// so it cannot be raced by a path swapped inside the sandbox; kernels
	// older than 4.13 lack it, and then the path through the holder's root is
	// the only way.
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	sfd := int(r)
	if errno != 0 {
		sfd, err = openInRoot(root.Fd(), name, unix.O_RDWR|unix.O_NOCTTY)
		if err != nil {
			return fail(fmt.Errorf("open pty slave %s of the sandbox: %w", name, err))
		}
	}
	if err := unix.Fchown(sfd, int(uid), int(ttyGroup(root, gid))); err != nil {
		unix.Close(sfd)
		return fail(fmt.Errorf("give pty %s to uid %d: %w", name, uid, err))
	}
	if err := unix.Fchmod(sfd, 0o620); err != nil {
		unix.Close(sfd)
		return fail(fmt.Errorf("chmod pty %s: %w", name, err))
	}
	// The master is served by the poller, so that a read can be ended by a
	// deadline or by Close instead of pinning a thread.
	if err := unix.SetNonblock(mfd, true); err != nil {
		unix.Close(sfd)
		return fail(fmt.Errorf("make pty master nonblocking: %w", err))
	}
	return &pty{
		master: os.NewFile(uintptr(mfd), "ptmx"),
		slave:  os.NewFile(uintptr(sfd), name),
		name:   name,
	}, nil
}

// openInRoot opens path as the sandbox resolves it: symlinks the agent
// planted resolve inside the sandbox's root, never in the substrate's.
func openInRoot(root int, path string, flags int) (int, error) {
	return unix.Openat2(root, path, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// ttyGroup is the gid of the group "tty" in the sandbox's group file, else
// fallback (the user's own group), as for a system without that group. The
// agent's root can put a FIFO or a link to /dev/urandom there: idmap reads
// it through imagefile, which reads regular files only, and only so much.
func ttyGroup(root *imagefile.Root, fallback uint32) uint32 {
	if gid, err := idmap.GroupID(root, "tty"); err == nil {
		return gid
	}
	return fallback
}

// setTermios applies the client's terminal modes to the slave.
func setTermios(slave *os.File, modes []byte) error {
	if len(modes) == 0 {
		return nil
	}
	fd := int(slave.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("read terminal modes of %s: %w", slave.Name(), err)
	}
	ApplyModes(t, modes)
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return fmt.Errorf("set terminal modes of %s: %w", slave.Name(), err)
	}
	return nil
}

// setSize sets the window size through the master. The kernel sends SIGWINCH
// to the terminal's foreground group; nothing touches the input queue, so a
// resize never disturbs typing (docs/failures.md#resize-never-ends-input).
func setSize(master *os.File, s Size) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, s.winsize())
	}); err != nil {
		return err
	}
	if ioErr != nil {
		return fmt.Errorf("set window size %dx%d: %w", s.Cols, s.Rows, ioErr)
	}
	return nil
}

// sendBreak asks the line discipline for a break, as sshd does for the SSH
// "break" request; a pty has no line to break, so this is mostly a no-op that
// succeeds.
func sendBreak(master *os.File) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetInt(int(fd), unix.TCSBRK, 0)
	}); err != nil {
		return err
	}
	return ioErr
}

// isPTYEOF reports whether a read error from the master means that every
// slave descriptor is closed: Linux answers EIO, not EOF.
func isPTYEOF(err error) bool {
	return errors.Is(err, unix.EIO)
}

// typeEOF types the terminal's end-of-file character into its master, after
// last, the last byte typed (-1 for none). In canonical mode the character
// hands over the line typed so far, and on an empty line it is end of file
// to the reader; so an unfinished line takes it twice, as at a keyboard.
// Where the terminal cannot be read, ^D twice is safe either way.
func typeEOF(master *os.File, last int) {
	keys := []byte{4, 4}
	if rc, err := master.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
			if err != nil {
				return
			}
			if eof := t.Cc[unix.VEOF]; eof != 0 {
				keys[0], keys[1] = eof, eof
			}
			if lineEnded(t, last) {
				keys = keys[:1]
			}
		})
	}
	master.Write(keys)
}

// lineEnded says whether the line discipline of t has no unfinished line
// after last: nothing typed, or a byte that ends a line in its settings.
func lineEnded(t *unix.Termios, last int) bool {
	switch {
	case last < 0 || last == '\n':
		return true
	case last == '\r':
		return t.Iflag&unix.ICRNL != 0 && t.Iflag&unix.IGNCR == 0
	case last == int(t.Cc[unix.VEOL]) || last == int(t.Cc[unix.VEOL2]):
		return last != 0 // 0 is an unset VEOL
	}
	return false
}
