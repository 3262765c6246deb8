package grade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// The visitor is a child role: join.Cmd puts it in the sandbox's user and
// network namespaces, and it builds its own mount namespace there, starts the
// verifier, and reports. It holds full capabilities in the sandbox's user
// namespace until the enter step drops them for the verifier, so it runs only
// code from this binary and opens nothing the agent chose.

const roleVisitor = "visitor"

// Descriptors the visitor receives (fd 3 is this binary, see join.Cmd).
const (
	fdParams = 4 // visitorParams as JSON, in a memfd
	fdOutput = 5 // test-stdout.txt: the verifier's stdout and stderr
	fdResult = 6 // write end of the pipe the visitorResult goes back on
)

func init() { childproc.Add(roleVisitor, visitor) }

// errReplaced means a mount point in the shared filesystem is no longer the
// directory the daemon checked: something in the sandbox swapped it.
var errReplaced = errors.New("the directory was replaced in the shared filesystem as grading started")

// visitorParams is everything the visitor needs; it travels in a memfd so
// that none of it shows in a command line.
type visitorParams struct {
	Holder int       `json:"holder"` // the sandbox's pid 1, whose mount namespace gets the pins
	Pin    []string  `json:"pin"`    // bind targets to pin in the sandbox's view (see pin)
	Binds  []bind    `json:"binds"`
	Mask   []string  `json:"mask"`  // covered by an empty read-only tmpfs (a file: by /dev/null)
	Hosts  string    `json:"hosts"` // a hosts file bound over /etc/hosts; "" keeps the substrate's
	Spec   join.Spec `json:"spec"`
}

// bind is one directory of the harness bound into the visitor's view. The
// target is in the shared filesystem, where the agent can replace it: the
// daemon names the directory it checked (Dev, Ino), and the visitor mounts
// onto that one or not at all.
type bind struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
}

// visitorResult is the visitor's report. Setup is set when its own view could
// not be built (sandboxd's failure); Start when the verifier could not be
// started (the task's); otherwise Code and Signal are the leader's.
type visitorResult struct {
	Setup  string `json:"setup,omitempty"`
	Start  string `json:"start,omitempty"`
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
}

func visitor(_ []string) int {
	// Mount namespaces are per thread in Go's view of the world: every mount
	// and the fork of the verifier happen on this one thread, which never
	// runs anything else and ends with the process.
	runtime.LockOSThread()
	for fd := fdParams; fd <= fdResult; fd++ {
		unix.CloseOnExec(fd)
	}
	result := os.NewFile(fdResult, "result")
	report := func(r visitorResult) int {
		json.NewEncoder(result).Encode(r)
		if r.Setup != "" || r.Start != "" {
			return join.ExitSetup
		}
		return r.Code
	}
	var p visitorParams
	raw, err := io.ReadAll(os.NewFile(fdParams, "params"))
	if err != nil {
		return report(visitorResult{Setup: fmt.Sprintf("read visitor parameters: %v", err)})
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return report(visitorResult{Setup: fmt.Sprintf("decode visitor parameters: %v", err)})
	}
	if err := pin(p.Holder, p.Pin); err != nil {
		return report(visitorResult{Setup: err.Error()})
	}
	// The pins go when the verifier is done; if we are killed first (the
	// timeout), the daemon's removal of /tests detaches them.
	defer unpin(p.Holder, p.Pin)
	if err := buildView(p); err != nil {
		if errors.Is(err, errReplaced) {
			// The agent's doing, not ours: the verdict says so.
			return report(visitorResult{Start: err.Error(), Code: join.ExitSetup})
		}
		return report(visitorResult{Setup: err.Error()})
	}
	// Whatever the verifier leaves behind is re-parented to us, not to the
	// substrate's init, so that we can end it (lesson 60).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return report(visitorResult{Setup: fmt.Sprintf("become a child subreaper: %v", err)})
	}
	// SIGTERM is our parent-death signal (see runVisitor): if the daemon
	// dies while the verifier runs, its whole tree ends with us rather than
	// run on in the substrate.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		killLeftovers()
		os.Exit(128 + int(syscall.SIGTERM))
	}()
	return report(runVerifier(p.Spec))
}

// runVerifier starts the verifier through the same enter step as a session
// and waits for the leader only: a background child holding the output open
// must not hold up grading (lesson 41). Then it ends everything left below us.
func runVerifier(spec join.Spec) visitorResult {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return visitorResult{Setup: fmt.Sprintf("open %s: %v", os.DevNull, err)}
	}
	defer devnull.Close()
	output := os.NewFile(fdOutput, "test-stdout.txt")
	st, err := join.Here(spec)
	if err != nil {
		return visitorResult{Start: err.Error()}
	}
	st.Cmd.Stdin, st.Cmd.Stdout, st.Cmd.Stderr = devnull, output, output
	_, err = st.Start()
	if err != nil {
		st.Cmd.Wait()
		killLeftovers()
		var se *join.SetupError
		if errors.As(err, &se) {
			return visitorResult{Start: se.Msg, Code: se.Code}
		}
		return visitorResult{Start: err.Error()}
	}
	werr := st.Cmd.Wait()
	killLeftovers()
	code, sig, ok := join.ExitStatus(werr)
	if !ok {
		return visitorResult{Setup: fmt.Sprintf("wait for the verifier: %v", werr)}
	}
	return visitorResult{Code: code, Signal: int(sig)}
}

// killLeftovers kills every process below the visitor until none is left.
// As a child subreaper, everything the verifier started stays below us,
// however it detached (setsid, double fork, nohup).
func killLeftovers() {
	self := os.Getpid()
	for round := 0; ; round++ {
		pids := join.Descendants(self)
		for _, pid := range pids {
			unix.Kill(pid, syscall.SIGKILL)
		}
		var ws unix.WaitStatus
		for {
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.ECHILD {
				return
			}
			if pid <= 0 || err != nil {
				break
			}
		}
		if round > 10 {
			time.Sleep(time.Millisecond)
		}
	}
}

// pin covers each path with an empty read-only tmpfs in the *sandbox's*
// mount namespace, for as long as the verifier runs. The bind targets live
// in the shared filesystem, and a root agent could otherwise rename or
// remove /tests under the verifier — removing a directory detaches what
// other namespaces mounted on it — and put files of its own there for the
// verifier to run. A directory that is a mount point in the agent's own
// namespace can be neither renamed nor removed, and the agent, without
// CAP_SYS_ADMIN, cannot unmount the pin. The agent sees an empty /tests
// either way. Pinning comes before the binds, which then check that /tests
// is still the directory the daemon made: once pinned it cannot change.
func pin(holder int, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	return inSandboxMounts(holder, func() error {
		for _, p := range paths {
			flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
			if err := unix.Mount("tmpfs", p, "tmpfs", flags, "size=4k,mode=0555"); err != nil {
				return fmt.Errorf("pin %s in the sandbox: %w", p, err)
			}
		}
		return nil
	})
}

// unpin takes one pin off each path (the topmost: pins of visitors that
// overlap stack, and each takes one away).
func unpin(holder int, paths []string) {
	if len(paths) == 0 {
		return
	}
	inSandboxMounts(holder, func() error {
		for _, p := range paths {
			unix.Unmount(p, unix.MNT_DETACH)
		}
		return nil
	})
}

// inSandboxMounts runs fn on an OS thread of its own that has joined the
// sandbox's mount namespace. The thread is never unlocked, so it ends with
// its goroutine and nothing else ever runs in that namespace. It has to
// leave the filesystem attributes it shares with the other threads first:
// setns refuses a mount namespace to a thread that shares them.
func inSandboxMounts(holder int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare filesystem attributes: %w", err)
			return
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", holder), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open the sandbox's mount namespace: %w", err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNS)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("join the sandbox's mount namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// buildView makes the visitor's mount namespace: private, the harness's two
// directories bound at /tests and /logs/verifier, the harness and the other
// masked paths covered, and Docker's read-only and masked paths re-applied.
func buildView(p visitorParams) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	// Nothing we mount may propagate back to the substrate or the sandbox.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Binds first: their sources are in the harness dir, which is masked next.
	for _, b := range p.Binds {
		if err := bindOnto(b); err != nil {
			return err
		}
	}
	if p.Hosts != "" {
		if err := bindHosts(p.Hosts); err != nil {
			return err
		}
	}
	for _, m := range p.Mask {
		if err := mask(m, true); err != nil {
			return err
		}
	}
	for _, m := range bwrap.ReadOnlyPaths {
		if err := bindReadOnly(m); err != nil {
			return err
		}
	}
	for _, m := range bwrap.MaskedPaths {
		if err := mask(m, false); err != nil {
			return err
		}
	}
	return nil
}

// bindOnto binds b.Source onto b.Target, which must be the directory the
// daemon checked. Both are opened without following symlinks and mounted
// through /proc/self/fd, so nothing can be swapped in between.
func bindOnto(b bind) error {
	src, err := openDir(b.Source, unix.O_PATH)
	if err != nil {
		return fmt.Errorf("bind %s: %w", b.Target, err)
	}
	defer unix.Close(src)
	dst, err := openDir(b.Target, unix.O_PATH)
	if err != nil {
		if errors.Is(err, errNotDirectory) || errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w: %w", errReplaced, err)
		}
		return fmt.Errorf("bind %s: %w", b.Target, err)
	}
	defer unix.Close(dst)
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil {
		return fmt.Errorf("bind %s: %w", b.Target, err)
	}
	if st.Dev != b.Dev || st.Ino != b.Ino {
		return fmt.Errorf("bind %s: %w", b.Target, errReplaced)
	}
	if err := unix.Mount(fdPath(src), fdPath(dst), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", b.Source, b.Target, err)
	}
	return nil
}

// mask covers path with an empty read-only tmpfs (a directory) or /dev/null
// (anything else). A path that does not exist needs no mask; with strict, a
// path that cannot be opened without following a symlink is an error, else
// it is skipped (Docker's lists name paths that some kernels lack).
func mask(path string, strict bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if err == unix.ENOENT || !strict {
			return nil
		}
		return fmt.Errorf("mask %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		fd, err := openDir(path, unix.O_PATH)
		if err != nil {
			if !strict {
				return nil
			}
			return fmt.Errorf("mask %s: %w", path, err)
		}
		defer unix.Close(fd)
		flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if err := unix.Mount("tmpfs", fdPath(fd), "tmpfs", flags, "size=4k,mode=0755"); err != nil {
			return fmt.Errorf("mask %s: %w", path, err)
		}
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if strict {
			return fmt.Errorf("mask %s: is a symlink; name the real path", path)
		}
		return nil
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if !strict {
			return nil
		}
		return fmt.Errorf("mask %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount(os.DevNull, fdPath(fd), "", unix.MS_BIND, ""); err != nil {
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
	// ENOSYS before Linux 5.12; EPERM where a seccomp profile predates the
	// call (Docker 20.10's default, and ours derived from it, deny it).
	if err != unix.ENOSYS && err != unix.EPERM {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	// Remount every mount of the tree one by one, each keeping the flags
	// the user namespace locked (a remount that drops one is refused).
	points, err := mountsUnder(path)
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
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
// namespace, shallowest first, from /proc/self/mountinfo.
func mountsUnder(path string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
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

// bindHosts binds the daemon's hosts file (in the harness dir, a regular
// file) over /etc/hosts. The bind is in the visitor's own mount namespace:
// whatever the agent did to /etc/hosts, nothing leaves that namespace.
func bindHosts(source string) error {
	src, err := unix.Open(source, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bind the hosts file: %w", err)
	}
	defer unix.Close(src)
	dst, err := unix.Open("/etc/hosts", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bind the hosts file over /etc/hosts: %w", err)
	}
	defer unix.Close(dst)
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("bind the hosts file: /etc/hosts is not a regular file: %w", errReplaced)
	}
	if err := unix.Mount(fdPath(src), fdPath(dst), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the hosts file over /etc/hosts: %w", err)
	}
	return nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
