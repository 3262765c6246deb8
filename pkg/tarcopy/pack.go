package tarcopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
)

// Pack writes src as a tar stream to w, as docker cp reads a source: a
// file or a symlink (the link itself, not what it points to) as one entry
// named after it; a directory as that name and everything below it; `DIR/.`
// as DIR's contents, under "./". Below the top, no symlink is followed: every
// name is opened beneath its parent's descriptor with O_NOFOLLOW, so a name
// swapped for a link mid-walk is an error, not a detour. src's own path
// follows symlinks inside the sandbox's view, as docker's does, and none
// outside it (inside false), where the agent can plant them in the
// filesystem it shares with the substrate. Sockets, FIFOs and devices are
// left out, each named on skipped.
func Pack(w io.Writer, src string, inside bool, skipped io.Writer) error {
	tw := tar.NewWriter(w)
	p := &packer{tw: tw, skipped: skipped}
	if err := p.top(src, inside); err != nil {
		return err
	}
	return tw.Close()
}

type packer struct {
	tw      *tar.Writer
	skipped io.Writer
}

// top packs the named source; a trailing "/" or "/." asks for a directory.
func (p *packer) top(src string, inside bool) error {
	contents := src == "." || strings.HasSuffix(src, "/.")
	wantDir := contents || strings.HasSuffix(src, "/")
	clean := path.Clean(src)
	name := path.Base(clean)
	if contents {
		name = "."
	}
	parentPath, base := path.Dir(clean), path.Base(clean)
	if clean == "/" {
		parentPath, base = "/", "."
	}
	parent, err := openPath(parentPath, unix.O_PATH|unix.O_DIRECTORY, inside)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	defer unix.Close(parent)
	if !wantDir {
		var st unix.Stat_t
		if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		return p.entry(parent, base, name)
	}
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if !inside {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat(parent, base, flags, 0)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		// O_NOFOLLOW|O_DIRECTORY says ENOTDIR for a symlink too.
		var st unix.Stat_t
		if unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return fmt.Errorf("%s is a symlink: sandboxd cp follows no symlink outside the sandbox (the agent can plant them); name the path it points to", src)
			}
			return fmt.Errorf("%s: %w", src, ErrNotDirectory)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return p.opened(fd, name)
}

// entry packs the name below dir, archived as arch.
func (p *packer) entry(dir int, name, arch string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", arch, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(dir, name)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		h := header(&st, arch, tar.TypeSymlink)
		h.Linkname = target
		return p.tw.WriteHeader(h)
	case unix.S_IFREG, unix.S_IFDIR:
		// Never blocking on a FIFO nor taking a terminal, should the name
		// have been swapped for one since it was looked at.
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		return p.opened(fd, arch)
	default:
		fmt.Fprintf(p.skipped, "sandboxd cp: %s: a socket, FIFO or device, not copied\n", arch)
		return nil
	}
}

// opened packs what fd is open on (and closes it): a regular file or a
// directory, judged by the descriptor, never by a name that may have
// changed since.
func (p *packer) opened(fd int, arch string) error {
	f := os.NewFile(uintptr(fd), arch)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", arch, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		h := header(&st, arch, tar.TypeReg)
		h.Size = st.Size
		if err := p.tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.CopyN(p.tw, f, st.Size); err != nil {
			return fmt.Errorf("%s: %w (did it change while it was copied?)", arch, err)
		}
		return nil
	case unix.S_IFDIR:
		if err := p.tw.WriteHeader(header(&st, arch+"/", tar.TypeDir)); err != nil {
			return err
		}
		names, err := beneath.ReadDirNames(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		for _, n := range names {
			// Not path.Join: it would drop the "./" that marks contents.
			if err := p.entry(fd, n, arch+"/"+n); err != nil {
				return err
			}
		}
		return nil
	default:
		fmt.Fprintf(p.skipped, "sandboxd cp: %s: a socket, FIFO or device, not copied\n", arch)
		return nil
	}
}

// header is the tar header of st; PAX keeps nanosecond times and any size.
func header(st *unix.Stat_t, name string, typ byte) *tar.Header {
	return &tar.Header{
		Typeflag:   typ,
		Name:       name,
		Mode:       int64(st.Mode & 07777),
		Uid:        int(st.Uid),
		Gid:        int(st.Gid),
		ModTime:    time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		AccessTime: time.Unix(st.Atim.Sec, st.Atim.Nsec),
		Format:     tar.FormatPAX,
	}
}

func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
