package grade

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Every path below is walked one component at a time with O_NOFOLLOW and
// every change is made through a descriptor (lesson 40): the verdict
// directory belongs to the verifier, which runs the agent's code, and the
// shared filesystem belongs to the agent. A planted symlink must never turn a
// chown, a write or a read by root into one on another file.

// openDir opens the directory abs, following no symlink in any component.
// flags are added to O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC (O_PATH for a
// descriptor that only anchors *at calls, O_RDONLY to read or lock it).
func openDir(abs string, flags int) (int, error) {
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
			return -1, fmt.Errorf("open %s: %w", "/"+path.Join(parts[:i+1]...), noFollowErr(err))
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

// errNotDirectory marks a path where a directory must be but something else
// is: in the shared filesystem, something the agent put there.
var errNotDirectory = errors.New("a symlink or a file where a directory must be")

// noFollowErr explains the errors O_NOFOLLOW|O_DIRECTORY give for a symlink.
func noFollowErr(err error) error {
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return fmt.Errorf("%w (%w)", err, errNotDirectory)
	}
	return err
}

// readDirNames lists the directory open at dirfd, sorted.
func readDirNames(dirfd int) ([]string, error) {
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

// owner is who the copy is handed to: the verifier's uid and gid.
type owner struct{ uid, gid int }

// copyTree copies the directory srcfd into the existing directory dstfd,
// giving every entry to own. Symlinks are copied as symlinks and never
// followed, regular files and directories keep their permission bits (less
// setuid and setgid), and anything else (FIFOs, sockets, devices) is left
// out with a warning. rel names the directory in messages.
func copyTree(srcfd, dstfd int, own owner, rel string, log *slog.Logger) error {
	names, err := readDirNames(srcfd)
	if err != nil {
		return fmt.Errorf("list %s: %w", rel, err)
	}
	for _, name := range names {
		relName := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(srcfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", relName, err)
		}
		mode := st.Mode & 0o1777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := copyDir(srcfd, dstfd, name, mode, own, relName, log); err != nil {
				return err
			}
		case unix.S_IFREG:
			if relName == "tests/test.sh" {
				mode |= 0o111 // Harbor chmods test.sh +x as root before running it (lesson 63)
			}
			if err := copyFile(srcfd, dstfd, name, mode, own, relName); err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(srcfd, name, buf)
			if err != nil {
				return fmt.Errorf("read link %s: %w", relName, err)
			}
			if err := unix.Symlinkat(string(buf[:n]), dstfd, name); err != nil {
				return fmt.Errorf("copy link %s: %w", relName, err)
			}
			if err := unix.Fchownat(dstfd, name, own.uid, own.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("lchown %s: %w", relName, err)
			}
		default:
			log.Warn("tests: left out an entry that is not a file, directory or symlink", "path", relName, "mode", fmt.Sprintf("%#o", st.Mode))
		}
	}
	return nil
}

func copyDir(srcfd, dstfd int, name string, mode uint32, own owner, rel string, log *slog.Logger) error {
	sfd, err := unix.Openat(srcfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	defer unix.Close(sfd)
	if err := unix.Mkdirat(dstfd, name, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	dfd, err := unix.Openat(dstfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open copy of %s: %w", rel, err)
	}
	defer unix.Close(dfd)
	if err := copyTree(sfd, dfd, own, rel, log); err != nil {
		return err
	}
	return chownChmod(dfd, mode, own, rel)
}

func copyFile(srcfd, dstfd int, name string, mode uint32, own owner, rel string) error {
	sfd, err := unix.Openat(srcfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	src := os.NewFile(uintptr(sfd), rel)
	defer src.Close()
	dfd, err := unix.Openat(dstfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create copy of %s: %w", rel, err)
	}
	dst := os.NewFile(uintptr(dfd), rel)
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	return chownChmod(dfd, mode, own, rel)
}

// chownChmod hands an entry over through its descriptor; chmod comes last
// because chown clears the setuid and setgid bits the mode might hold.
func chownChmod(fd int, mode uint32, own owner, rel string) error {
	if err := unix.Fchown(fd, own.uid, own.gid); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", rel, own.uid, own.gid, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	return nil
}

// copyOut copies the regular files at the top of the directory srcfd into
// the directory dst, replacing what is there. Neither side follows a
// symlink: a name in dst is unlinked and created afresh with O_EXCL, so a
// symlink planted there is replaced, never written through; a symlink or
// FIFO in srcfd is left out.
func copyOut(srcfd int, dst string, dev, ino uint64, log *slog.Logger) error {
	dfd, err := openDir(dst, unix.O_PATH)
	if err != nil {
		return fmt.Errorf("open logs dir: %w", err)
	}
	defer unix.Close(dfd)
	if dev != 0 || ino != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(dfd, &st); err != nil {
			return fmt.Errorf("stat logs dir: %w", err)
		}
		if st.Dev != dev || st.Ino != ino {
			return fmt.Errorf("%s is no longer the directory it was when serve started (the agent may have renamed its parent): the verdict is not copied there", dst)
		}
	}
	names, err := readDirNames(srcfd)
	if err != nil {
		return fmt.Errorf("list the verdict directory: %w", err)
	}
	var errs []error
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(srcfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			if err == nil {
				log.Warn("verdict: not copied to the logs dir: not a regular file", "name", name, "mode", fmt.Sprintf("%#o", st.Mode))
			}
			continue
		}
		if err := copyOne(srcfd, dfd, name, dst); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func copyOne(srcfd, dstfd int, name, dst string) error {
	sfd, err := unix.Openat(srcfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open verdict file %s: %w", name, err)
	}
	src := os.NewFile(uintptr(sfd), name)
	defer src.Close()
	if st, err := src.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("verdict file %s changed while being copied", name)
	}
	if err := unix.Unlinkat(dstfd, name, 0); err != nil && err != unix.ENOENT {
		return fmt.Errorf("replace %s/%s: %w", dst, name, err)
	}
	dfd, err := unix.Openat(dstfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s/%s: %w", dst, name, err)
	}
	out := os.NewFile(uintptr(dfd), name)
	defer out.Close()
	if _, err := io.Copy(out, src); err != nil {
		return fmt.Errorf("copy %s to %s: %w", name, dst, err)
	}
	return nil
}

// nextNumber is one more than the largest number among names.
func nextNumber(names []string) int {
	n := 0
	for _, s := range names {
		if k, err := strconv.Atoi(s); err == nil && k > n {
			n = k
		}
	}
	return n + 1
}
