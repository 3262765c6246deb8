package grade

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
)

// Every path below is opened with package beneath and every change is made
// through a descriptor (docs/failures.md#grading-never-follows-symlinks): the
// verdict directory belongs to the verifier, which runs the agent's code, and
// the shared filesystem belongs to the agent.

// owner is who the copy is handed to: the verifier's uid and gid.
type owner struct{ uid, gid int }

// copyTree copies the directory srcfd into the existing directory dstfd,
// giving every entry to own. Symlinks are copied as symlinks and never
// followed, regular files and directories keep their permission bits (less
// setuid and setgid), and anything else (FIFOs, sockets, devices) is left
// out with a warning. rel names the directory in messages.
func copyTree(srcfd, dstfd int, own owner, rel string, log *slog.Logger) error {
	names, err := beneath.ReadDirNames(srcfd)
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
				// Harbor chmods test.sh +x as root before running it
				// (docs/failures.md#non-executable-test-script-still-runs).
				mode |= 0o111
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
	dfd, err := beneath.OpenDir(dst, unix.O_PATH)
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
	names, err := beneath.ReadDirNames(srcfd)
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
