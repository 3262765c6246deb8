package visit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
	"github.com/sandboxd/sandboxd/internal/masks"
)

// buildView gives the visitor a root of its own and makes it the visitor's
// root. The root is a tmpfs whose top-level entries are binds of the
// substrate's: /tests and /logs/verifier exist only in this view, bound from
// the harness dir, and /logs is rebuilt the same way one level down, so
// nothing of grading is ever made in the shared filesystem and no name in it
// that the agent can rename, swap or replace is resolved again once the view
// stands. Everything is opened beneath a directory descriptor, without
// following symlinks, and mounted through /proc/self/fd.
func buildView(p params) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	// Nothing we mount may propagate back to the substrate or the sandbox.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	harness, err := openDirID(p.Harness)
	if err != nil {
		return err
	}
	defer unix.Close(harness)
	var tests, verdict, hosts, resolv = -1, -1, -1, -1
	defer func() {
		for _, fd := range []int{tests, verdict, hosts, resolv} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	if p.Tests != "" {
		if tests, err = beneath.Open(harness, p.Tests, unix.O_PATH|unix.O_DIRECTORY); err != nil {
			return fmt.Errorf("open the tests to bind: %w", err)
		}
	}
	if p.Verdict != "" {
		if verdict, err = beneath.Open(harness, p.Verdict, unix.O_PATH|unix.O_DIRECTORY); err != nil {
			return fmt.Errorf("open the verdict directory to bind: %w", err)
		}
	}
	if p.Hosts != "" {
		if hosts, err = beneath.Open(harness, p.Hosts, unix.O_PATH); err != nil {
			return fmt.Errorf("open the visitors' hosts file: %w", err)
		}
	}
	if p.Resolv != "" {
		if resolv, err = beneath.Open(harness, p.Resolv, unix.O_PATH); err != nil {
			return fmt.Errorf("open the visitors' resolv.conf: %w", err)
		}
	}

	// The masks go on first, in the substrate's view, so that the binds
	// below carry them: the harness dir itself by the descriptor checked
	// above, the rest found without following a symlink.
	if err := maskFD(harness, p.Harness.Path); err != nil {
		return err
	}
	for _, m := range p.Mask {
		if err := mask(m, true); err != nil {
			return err
		}
	}

	// The new root is staged on <harness>/visit, which every visitor uses
	// in a mount namespace of its own. It is under the mask just made, and
	// reached through the harness descriptor, which still names the
	// directory below the mask.
	if err := unix.Mkdirat(harness, "visit", 0o700); err != nil && err != unix.EEXIST {
		return fmt.Errorf("create the visitor's mount point: %w", err)
	}
	stage, err := unix.Openat(harness, "visit", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the visitor's mount point: %w", err)
	}
	err = unix.Mount("tmpfs", beneath.FDPath(stage), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64m")
	unix.Close(stage)
	if err != nil {
		return fmt.Errorf("mount the visitor's root: %w", err)
	}
	root, err := unix.Openat(harness, "visit", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the visitor's root: %w", err)
	}
	defer unix.Close(root)
	// Unbindable: the recursive bind of the top-level directory that holds
	// the harness dir must not copy the root being built into itself.
	if err := unix.Mount("", beneath.FDPath(root), "", unix.MS_UNBINDABLE, ""); err != nil {
		return fmt.Errorf("make the visitor's root unbindable: %w", err)
	}

	old, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /: %w", err)
	}
	defer unix.Close(old)
	// Our own: /proc (mounted fresh below), /dev, /tests and /logs.
	own := map[string]bool{"proc": true, "dev": true, testsDir: true, logsDir: true}
	if err := bindEntries(old, root, own); err != nil {
		return err
	}
	if err := makeDev(old, root, p.Devices); err != nil {
		return err
	}
	if err := makeLogs(old, root, verdict); err != nil {
		return err
	}
	if tests >= 0 {
		if err := bindDirAt(tests, root, testsDir, 0o755); err != nil {
			return err
		}
	}
	// A proc of the visitor's own pid namespace: the verifier sees its own
	// processes, never the daemon's. It is mounted while the substrate's
	// proc is still in this namespace (the kernel refuses a proc mount in
	// a namespace without a fully visible one).
	if err := unix.Mkdirat(root, "proc", 0o555); err != nil {
		return fmt.Errorf("create /proc in the visitor's root: %w", err)
	}
	if err := mountAt(root, "proc", func(target string) error {
		return unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}); err != nil {
		return fmt.Errorf("mount /proc in the visitor's root: %w", err)
	}
	if hosts >= 0 {
		if err := bindEtcFile(hosts, root, "hosts"); err != nil {
			return err
		}
	}
	if resolv >= 0 {
		if err := bindEtcFile(resolv, root, "resolv.conf"); err != nil {
			return err
		}
	}
	if err := pivotInto(root); err != nil {
		return err
	}

	// In the visitor's own root now: /proc is ours and /sys is the
	// substrate's, neither of which the agent can write, so Docker's paths
	// are taken by name.
	for _, m := range masks.ReadOnly {
		if err := bindReadOnly(m); err != nil {
			return err
		}
	}
	for _, m := range masks.Masked {
		if err := mask(m, false); err != nil {
			return err
		}
	}
	return nil
}

// The top-level names the view makes itself.
const (
	testsDir = "tests"
	logsDir  = "logs"
)

// openDirID opens the directory id names, following no symlink, and only if
// it is still the directory the daemon opened.
func openDirID(id dirID) (int, error) {
	fd, err := beneath.OpenDir(id.Path, unix.O_PATH)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", id.Path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat %s: %w", id.Path, err)
	}
	if st.Dev != id.Dev || st.Ino != id.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", id.Path, errReplaced)
	}
	return fd, nil
}

// bindEntries binds every entry of the directory from into the directory
// to (a tmpfs of ours), but those named in skip: directories with whatever
// is mounted below them, files onto empty files, symlinks copied as links.
// Each entry is opened once, without following it, and dealt with by what
// that descriptor is, so a swap between listing and opening changes nothing
// but which object is bound. Sockets, FIFOs and devices at this level are
// left out.
func bindEntries(from, to int, skip map[string]bool) error {
	names, err := beneath.ReadDirNames(from)
	if err != nil {
		return fmt.Errorf("list a directory for the visitor's view: %w", err)
	}
	for _, name := range names {
		if skip[name] {
			continue
		}
		fd, err := unix.Openat(from, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			continue // gone since the listing
		}
		if err != nil {
			return fmt.Errorf("open %s for the visitor's view: %w", name, err)
		}
		err = bindEntry(fd, to, name)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

func bindEntry(fd, to int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s for the visitor's view: %w", name, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return bindDirAt(fd, to, name, st.Mode&0o7777)
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return fmt.Errorf("read link %s for the visitor's view: %w", name, err)
		}
		if err := unix.Symlinkat(string(buf[:n]), to, name); err != nil {
			return fmt.Errorf("copy link %s into the visitor's view: %w", name, err)
		}
		return nil
	case unix.S_IFREG:
		return bindFileAt(fd, to, name)
	}
	return nil
}

// bindDirAt binds the directory src, with everything mounted below it, at
// the new directory name in to.
func bindDirAt(src, to int, name string, mode uint32) error {
	if err := unix.Mkdirat(to, name, mode); err != nil {
		return fmt.Errorf("create /%s in the visitor's view: %w", name, err)
	}
	// Recursive: a non-recursive bind of a tree with mounts locked by the
	// user namespace is refused with EINVAL.
	if err := mountAt(to, name, func(target string) error {
		return unix.Mount(beneath.FDPath(src), target, "", unix.MS_BIND|unix.MS_REC, "")
	}); err != nil {
		return fmt.Errorf("bind /%s into the visitor's view: %w", name, err)
	}
	return nil
}

// bindFileAt binds what fd is open on (a file or a device) onto a new empty
// file name in the directory to.
func bindFileAt(fd, to int, name string) error {
	dst, err := unix.Openat(to, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s in the visitor's view: %w", name, err)
	}
	unix.Close(dst)
	return mountAt(to, name, func(target string) error {
		return unix.Mount(beneath.FDPath(fd), target, "", unix.MS_BIND, "")
	})
}

// mountAt calls mount with the entry name of the directory dirfd as its
// target, opened without following it.
func mountAt(dirfd int, name string, mount func(target string) error) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return mount(beneath.FDPath(fd))
}

// makeLogs rebuilds /logs in the new root: a directory of ours whose
// entries are binds of the substrate's /logs, but for verifier, which is the
// grading's verdict directory (or, for a healthcheck, an empty directory).
func makeLogs(old, root, verdict int) error {
	if err := unix.Mkdirat(root, logsDir, 0o755); err != nil {
		return fmt.Errorf("create /logs in the visitor's view: %w", err)
	}
	logs, err := unix.Openat(root, logsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /logs in the visitor's view: %w", err)
	}
	defer unix.Close(logs)
	shared, err := unix.Openat(old, logsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		err = bindEntries(shared, logs, map[string]bool{"verifier": true})
		unix.Close(shared)
		if err != nil {
			return err
		}
	case err != unix.ENOENT && err != unix.ELOOP && err != unix.ENOTDIR:
		return fmt.Errorf("open /logs: %w", err)
	}
	if verdict < 0 {
		return unix.Mkdirat(logs, "verifier", 0o555)
	}
	return bindDirAt(verdict, logs, "verifier", 0o755)
}

// pivotInto makes the directory root (a mount point) this process's root,
// and detaches the old one, so that nothing of the substrate's view but
// what was bound is left to reach, not even by escaping a chroot.
func pivotInto(root int) error {
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("enter the visitor's root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot into the visitor's root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the substrate's root from the visitor's view: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("enter the visitor's root: %w", err)
	}
	return nil
}

// mask covers path with an empty read-only tmpfs (a directory) or /dev/null
// (anything else). A path that does not exist needs no mask. Every component
// is opened without following a symlink, and the mask goes onto what that
// descriptor is: with strict, a symlink on the way is an error, else the
// path is skipped (Docker's lists name paths that some kernels lack).
func mask(path string, strict bool) error {
	parent, err := beneath.OpenDir(filepath.Dir(path), unix.O_PATH)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || !strict {
			return nil
		}
		return fmt.Errorf("mask %s: %w", path, err)
	}
	defer unix.Close(parent)
	fd, err := unix.Openat(parent, filepath.Base(path), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		if !strict {
			return nil
		}
		return fmt.Errorf("mask %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mask %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if strict {
			return fmt.Errorf("mask %s: is a symlink; name the real path", path)
		}
		return nil
	}
	return maskFD(fd, path)
}

// maskFD covers what fd is open on (a directory: with an empty read-only
// tmpfs; anything else: with /dev/null).
func maskFD(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mask %s: %w", path, err)
	}
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		err = unix.Mount("tmpfs", beneath.FDPath(fd), "tmpfs", flags, "size=4k,mode=0755")
	} else {
		err = unix.Mount(os.DevNull, beneath.FDPath(fd), "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", path, err)
	}
	return nil
}

// bindReadOnly binds path onto itself (with everything mounted below it) and
// makes the whole tree read-only. A path that does not exist is skipped.
func bindReadOnly(path string) error {
	if _, err := os.Lstat(path); err != nil {
		return nil
	}
	// Recursive: a non-recursive bind of a tree with mounts locked by the
	// user namespace (ours, seen from the sandbox's) is refused with EINVAL.
	if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s read-only: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	err := unix.MountSetattr(-1, path, unix.AT_RECURSIVE, &attr)
	if err == nil {
		return nil
	}
	// ENOSYS before Linux 5.12; EPERM where the seccomp profile denies it
	// (Docker's default does without CAP_SYS_ADMIN, and so does ours).
	if err != unix.ENOSYS && err != unix.EPERM {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	// Remount every mount of the tree one by one, each keeping the flags
	// the user namespace locked (a remount that drops one is refused).
	points, err := mountsUnder(path)
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	// The bind above made path a mount point: a table without it is not
	// this namespace's, and nothing would be made read-only.
	if len(points) == 0 || points[0] != path {
		return fmt.Errorf("make %s read-only: it is not among this namespace's mount points", path)
	}
	for _, p := range points {
		if err := remountReadOnly(p); err != nil {
			return err
		}
	}
	return nil
}

func remountReadOnly(path string) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(sfs.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if err := unix.Mount("", path, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", path, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below path in this mount
// namespace, shallowest first, from /proc/thread-self/mountinfo: mount
// namespaces are per thread, and this one is the locked thread's (the
// process's leader, which /proc/self names, need not be it).
func mountsUnder(path string) ([]string, error) {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if (mp == path || strings.HasPrefix(mp, path+"/")) && !seen[mp] {
			seen[mp] = true
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Count(out[i], "/") < strings.Count(out[j], "/") })
	return out, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// bindEtcFile binds one of the daemon's files (src, in the harness dir:
// the hosts file, resolv.conf) read-only over /etc/<name> in the new root,
// whose /etc is a bind of the substrate's: whatever the agent did to that
// file, nothing leaves this namespace, and the verifier cannot write the
// harness's copy.
func bindEtcFile(src, root int, name string) error {
	path := "etc/" + name
	dst, err := beneath.Open(root, path, unix.O_PATH)
	if err != nil {
		return fmt.Errorf("bind the visitors' %s over /%s: %w (%w)", name, path, err, errReplaced)
	}
	defer unix.Close(dst)
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("bind the visitors' %s: /%s is not a regular file: %w", name, path, errReplaced)
	}
	if err := unix.Mount(beneath.FDPath(src), beneath.FDPath(dst), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the visitors' %s over /%s: %w", name, path, err)
	}
	// The descriptor names the file below the bind; the remount needs the
	// bind itself.
	bound, err := beneath.Open(root, path, unix.O_PATH)
	if err != nil {
		return fmt.Errorf("make the visitors' %s read-only: %w", name, err)
	}
	defer unix.Close(bound)
	return remountReadOnly(beneath.FDPath(bound))
}
