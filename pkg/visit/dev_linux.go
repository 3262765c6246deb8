package visit

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
)

// devNodes are the devices every /dev has, as bwrap's --dev makes it.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the links every /dev has.
var devLinks = [][2]string{
	{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
	{"stderr", "/proc/self/fd/2"}, {"core", "/proc/kcore"}, {"ptmx", "pts/ptmx"},
}

// makeDev makes the visitor's /dev as bwrap's --dev makes the sandbox's: a
// tmpfs with the usual devices bound from the substrate's /dev, the task's
// devices that are present (/dev/kvm, /dev/fuse, …), a devpts instance of
// its own and a /dev/shm of its own. Never the substrate's /dev itself: in
// a container it holds the ptys of `docker exec -it` sessions, on a bare
// host every disk, and the verifier runs code the agent planted.
func makeDev(old, root int, extra []string) error {
	if err := unix.Mkdirat(root, "dev", 0o755); err != nil {
		return fmt.Errorf("create /dev in the visitor's view: %w", err)
	}
	if err := mountAt(root, "dev", func(target string) error {
		return unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID, "mode=0755,size=1m")
	}); err != nil {
		return fmt.Errorf("mount /dev in the visitor's view: %w", err)
	}
	dev, err := unix.Openat(root, "dev", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev in the visitor's view: %w", err)
	}
	defer unix.Close(dev)
	src, err := unix.Openat(old, "dev", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the substrate's /dev: %w", err)
	}
	defer unix.Close(src)
	for _, name := range devNodes {
		if err := bindDevice(src, dev, name, true); err != nil {
			return err
		}
	}
	for _, d := range extra {
		rel, ok := strings.CutPrefix(filepath.Clean(d), "/dev/")
		if !ok || !filepath.IsLocal(rel) {
			return fmt.Errorf("device %s: only devices under /dev are bound", d)
		}
		if err := bindDevice(src, dev, rel, false); err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := unix.Symlinkat(l[1], dev, l[0]); err != nil {
			return fmt.Errorf("create /dev/%s in the visitor's view: %w", l[0], err)
		}
	}
	for _, m := range []struct{ name, fstype, data string }{
		{"pts", "devpts", "newinstance,ptmxmode=0666,mode=620"},
		{"shm", "tmpfs", "mode=1777,size=64m"},
	} {
		if err := unix.Mkdirat(dev, m.name, 0o755); err != nil {
			return fmt.Errorf("create /dev/%s in the visitor's view: %w", m.name, err)
		}
		if err := mountAt(dev, m.name, func(target string) error {
			return unix.Mount(m.fstype, target, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, m.data)
		}); err != nil {
			return fmt.Errorf("mount /dev/%s in the visitor's view: %w", m.name, err)
		}
	}
	return nil
}

// bindDevice binds the character device rel of the substrate's /dev (src)
// onto an empty file of the same name in dev. A device that is not there
// is left out unless required.
func bindDevice(src, dev int, rel string, required bool) error {
	fd, err := beneath.Open(src, rel, unix.O_PATH)
	if err == unix.ENOENT && !required {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open /dev/%s: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat /dev/%s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("/dev/%s is not a character device", rel)
	}
	parent := dev
	if dir := filepath.Dir(rel); dir != "." {
		for _, part := range strings.Split(dir, "/") {
			if err := unix.Mkdirat(parent, part, 0o755); err != nil && err != unix.EEXIST {
				return fmt.Errorf("create /dev/%s in the visitor's view: %w", dir, err)
			}
			next, err := unix.Openat(parent, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if parent != dev {
				unix.Close(parent)
			}
			if err != nil {
				return fmt.Errorf("open /dev/%s in the visitor's view: %w", dir, err)
			}
			parent = next
		}
		defer unix.Close(parent)
	}
	if err := bindFileAt(fd, parent, filepath.Base(rel)); err != nil {
		return fmt.Errorf("/dev/%s: %w", rel, err)
	}
	return nil
}
