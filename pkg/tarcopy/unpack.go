package tarcopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
)

// Extract unpacks the tar stream r at dst with docker cp's semantics: the
// archive's first entry is the copied source (Pack's output), and where it
// lands depends on what dst is (Resolve). With raw, r is any archive (cp's
// `-`), and dst must be a directory to unpack it into as it is.
//
// inside says that this process runs in the sandbox's view, whose symlinks
// may be followed in dst's own path as docker follows them; outside it, in
// the filesystem the agent shares with the substrate, no symlink is
// followed anywhere, dst's path included.
func Extract(r io.Reader, dst string, raw, inside bool, o Options) error {
	tr := tar.NewReader(r)
	first, err := tr.Next()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	src := source{raw: raw}
	if !raw {
		src.base, _, _ = strings.Cut(strings.TrimPrefix(first.Name, "/"), "/")
		src.dir = first.Typeflag == tar.TypeDir
	}
	d, err := resolve(dst, inside, src)
	if err != nil {
		return err
	}
	u := &unpacker{destination: d, o: o, tr: tr, lastParent: -1}
	defer u.close()
	for h := first; ; {
		if err := u.entry(h); err != nil {
			return err
		}
		if h, err = tr.Next(); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
	}
	return u.finish()
}

// source is what an archive's first entry says of the copied path.
type source struct {
	raw  bool   // any archive: no top entry to place
	base string // the top entry's name ("." for a directory's contents)
	dir  bool
}

// destination is where an archive is unpacked: beneath dir, with the top
// entry's name from renamed to to ("." unpacks a directory into dir itself).
type destination struct {
	dir      int
	from, to string
	raw      bool
	name     string // dst as given, for messages
}

// resolve decides where src lands at dst, as docker cp does:
//
//   - dst a directory: src goes into it under its own name, or, for
//     `SRC/.`, its contents do;
//   - dst a file: a file replaces it; a directory is ErrCannotCopyDir;
//   - dst missing: src is created as dst (its parent must exist); a file to
//     a missing `DIR/` is ErrDirNotExists;
//   - dst ending in "/" but a file: ErrNotDirectory.
func resolve(dst string, inside bool, src source) (*destination, error) {
	slash := strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, "/.")
	abs := dst
	if !path.IsAbs(abs) {
		if inside {
			abs = "/" + abs
		} else {
			wd, err := os.Getwd()
			if err != nil {
				return nil, err
			}
			abs = path.Join(wd, abs)
		}
	}
	abs = path.Clean(abs)
	parentPath, base := path.Dir(abs), path.Base(abs)
	if abs == "/" {
		parentPath, base = "/", "."
	}
	parent, err := openPath(parentPath, unix.O_PATH|unix.O_DIRECTORY, inside)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", parentPath, err)
	}
	defer unix.Close(parent)
	var st unix.Stat_t
	statFlags := unix.AT_SYMLINK_NOFOLLOW
	if inside {
		statFlags = 0
	}
	exists := true
	if err := unix.Fstatat(parent, base, &st, statFlags); errors.Is(err, unix.ENOENT) {
		exists = false
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", dst, err)
	}
	isDir := exists && st.Mode&unix.S_IFMT == unix.S_IFDIR
	if exists && !inside && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil, fmt.Errorf("%s is a symlink: sandboxd cp follows no symlink outside the sandbox (the agent can plant them); name the path it points to", dst)
	}
	d := &destination{dir: -1, raw: src.raw, name: dst}
	into := func(name string) (*destination, error) {
		flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
		if !inside {
			flags |= unix.O_NOFOLLOW
		}
		fd, err := unix.Openat(parent, name, flags, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dst, beneath.NoFollowErr(err))
		}
		d.dir = fd
		return d, nil
	}
	switch {
	case src.raw:
		if !isDir {
			return nil, fmt.Errorf("destination %q must be a directory", dst)
		}
		return into(base)
	case isDir:
		d.from, d.to = src.base, src.base
		return into(base)
	case exists && slash:
		return nil, fmt.Errorf("%s: %w", dst, ErrNotDirectory)
	case exists && src.dir:
		return nil, fmt.Errorf("%s: %w", dst, ErrCannotCopyDir)
	case !exists && slash && !src.dir:
		return nil, fmt.Errorf("%s: %w", dst, ErrDirNotExists)
	}
	// A file over a file, or anything to a new name: unpack into the
	// parent, under dst's name.
	d.from, d.to = src.base, base
	return into(".")
}

// openPath opens an absolute path: inside the sandbox's view as any
// program there would, outside it following no symlink at all.
func openPath(p string, flags int, inside bool) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if !inside {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, how)
	if errors.Is(err, unix.ELOOP) && !inside {
		return -1, fmt.Errorf("%w: a symlink in the path; sandboxd cp follows none outside the sandbox, name the real path", err)
	}
	return fd, err
}

// unpacker creates the entries of one archive beneath its destination.
type unpacker struct {
	*destination
	o  Options
	tr *tar.Reader
	// dirs are the directories the archive names, whose modes and times
	// are set last, deepest first: a read-only directory must still take
	// its entries, and every entry made in it changes its mtime.
	dirs []*tar.Header
	// lastParent is the parent directory of the last entry, held open:
	// archives list a directory's entries together.
	lastParent     int
	lastParentPath string
}

func (u *unpacker) close() {
	if u.lastParent >= 0 {
		unix.Close(u.lastParent)
	}
	unix.Close(u.dir)
}

// rel maps an archive name to a path beneath the destination, or refuses it.
func (u *unpacker) rel(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: %q is an absolute name", ErrRefused, name)
	}
	parts := strings.Split(name, "/")
	if !u.raw {
		if parts[0] != u.from {
			return "", fmt.Errorf("%w: %q lies outside the copied %q", ErrRefused, name, u.from)
		}
		parts[0] = u.to
	}
	var out []string
	for _, p := range parts {
		switch p {
		case "", ".":
		case "..":
			return "", fmt.Errorf("%w: %q climbs out with ..", ErrRefused, name)
		default:
			out = append(out, p)
		}
	}
	return strings.Join(out, "/"), nil
}

// parent opens the directory rel lies in, beneath the destination without
// following a symlink, making missing directories on the way as tar does.
func (u *unpacker) parent(rel string) (int, error) {
	dir := path.Dir(rel)
	if dir == "." {
		return u.dir, nil
	}
	if u.lastParent >= 0 && u.lastParentPath == dir {
		return u.lastParent, nil
	}
	fd, err := unix.FcntlInt(uintptr(u.dir), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	walked := ""
	for _, c := range strings.Split(dir, "/") {
		walked = path.Join(walked, c)
		next, err := beneath.Open(fd, c, unix.O_PATH|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil {
				err = unix.Fchownat(fd, c, u.o.UID, u.o.GID, unix.AT_SYMLINK_NOFOLLOW)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				next, err = beneath.Open(fd, c, unix.O_PATH|unix.O_DIRECTORY)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%w: %q: %q is a symlink or a file, not a directory, and no link is followed", ErrRefused, rel, walked)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %w", walked, err)
		}
		fd = next
	}
	if u.lastParent >= 0 {
		unix.Close(u.lastParent)
	}
	u.lastParent, u.lastParentPath = fd, dir
	return fd, nil
}

func (u *unpacker) ids(h *tar.Header) (int, int) {
	if u.o.Archive {
		return h.Uid, h.Gid
	}
	return u.o.UID, u.o.GID
}

func (u *unpacker) mode(h *tar.Header) uint32 {
	m := uint32(h.Mode) & 07777
	if !u.o.Archive {
		m &^= unix.S_ISUID | unix.S_ISGID
	}
	return m
}

func (u *unpacker) entry(h *tar.Header) error {
	switch h.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: %q is a device or a FIFO, which cp never creates", ErrRefused, h.Name)
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return fmt.Errorf("%w: %q has tar type %q, which cp does not create", ErrRefused, h.Name, h.Typeflag)
	}
	rel, err := u.rel(h.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		// The destination itself (a directory's contents into it): it is
		// there already, and keeps its own owner and mode.
		if h.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: %q names the destination itself", ErrRefused, h.Name)
		}
		return nil
	}
	parent, err := u.parent(rel)
	if err != nil {
		return err
	}
	base := path.Base(rel)
	uid, gid := u.ids(h)
	switch h.Typeflag {
	case tar.TypeDir:
		err := unix.Mkdirat(parent, base, 0o700)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if err = unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("cannot overwrite non-directory %q with directory %q", path.Join(u.name, rel), h.Name)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := unix.Fchownat(parent, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
		hc := *h
		hc.Name = rel
		u.dirs = append(u.dirs, &hc)
		return nil
	case tar.TypeSymlink:
		if err := u.replace(parent, base, rel, h, func() error { return unix.Symlinkat(h.Linkname, parent, base) }); err != nil {
			return err
		}
		if err := unix.Fchownat(parent, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
		return times(parent, base, h)
	case tar.TypeLink:
		return u.link(parent, base, rel, h)
	}
	var fd int
	if err := u.replace(parent, base, rel, h, func() (err error) {
		fd, err = unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	}); err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if _, err := io.Copy(f, u.tr); err != nil {
		return fmt.Errorf("write %s: %w", rel, err)
	}
	// Owner first: chown clears the setuid and setgid bits.
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if err := unix.Fchmod(fd, u.mode(h)); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	return times(parent, base, h)
}

// replace runs create, and when the name is taken by something other than
// a directory, removes that (never following it) and runs create again.
func (u *unpacker) replace(parent int, base, rel string, h *tar.Header, create func() error) error {
	err := create()
	if !errors.Is(err, unix.EEXIST) {
		if err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("cannot overwrite directory %q with non-directory %q", path.Join(u.name, rel), h.Name)
	}
	if err := unix.Unlinkat(parent, base, 0); err != nil {
		return fmt.Errorf("replace %s: %w", rel, err)
	}
	if err := create(); err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	return nil
}

// link makes a hard link to an entry this archive already made, found
// beneath the destination without following a symlink.
func (u *unpacker) link(parent int, base, rel string, h *tar.Header) error {
	target, err := u.rel(h.Linkname)
	if err != nil {
		return err
	}
	if target == "" {
		return fmt.Errorf("%w: hard link %q to the destination itself", ErrRefused, h.Name)
	}
	tdir := u.dir
	if d := path.Dir(target); d != "." {
		if tdir, err = beneath.Open(u.dir, d, unix.O_PATH|unix.O_DIRECTORY); err != nil {
			return fmt.Errorf("%w: hard link %q to %q: %v", ErrRefused, h.Name, h.Linkname, err)
		}
		defer unix.Close(tdir)
	}
	tbase := path.Base(target)
	var st unix.Stat_t
	if err := unix.Fstatat(tdir, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: hard link %q to %q, which is no regular file this copy made", ErrRefused, h.Name, h.Linkname)
	}
	return u.replace(parent, base, rel, h, func() error { return unix.Linkat(tdir, tbase, parent, base, 0) })
}

// finish sets the directories' modes and times, deepest first.
func (u *unpacker) finish() error {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		h := u.dirs[i]
		fd, err := beneath.Open(u.dir, h.Name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		err = unix.Fchmod(fd, u.mode(h))
		if err == nil {
			err = unix.UtimesNanoAt(fd, ".", timespecs(h), 0)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	return nil
}

func times(dir int, name string, h *tar.Header) error {
	if err := unix.UtimesNanoAt(dir, name, timespecs(h), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", name, err)
	}
	return nil
}

func timespecs(h *tar.Header) []unix.Timespec {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	return []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
}
