package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/memfd"
	"github.com/sandboxd/sandboxd/internal/tail"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/cleanup"
	"github.com/sandboxd/sandboxd/internal/forkthread"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// Config declares the sandbox. Everything the agent can see follows from it.
type Config struct {
	Bwrap   string     // bwrap binary: a path or a name on PATH ("bwrap")
	Workdir string     // the sandbox's working directory; must exist
	Hide    []string   // absolute paths that are absent inside (harness dir, task dir, /tests)
	Mask    []string   // directories covered by an empty tmpfs (/logs/verifier)
	Devices []string   // device nodes bound through when present (/dev/kvm, /dev/fuse, …)
	Files   []DataFile // files that exist only in the sandbox's view
	// HostSockets are covered by /dev/null inside: on a bare host, the
	// sockets that would hand the agent the machine (masks.HostSockets,
	// listed once by the caller; docs/failures.md#host-mode-masks-the-host).
	HostSockets   []string
	AllowDegraded bool          // accept a single-id map when the kernel refuses the identity map
	ReadyTimeout  time.Duration // bound on bwrap's setup; 0 means 15s
	Log           *slog.Logger
}

// Holder is the long-lived bwrap process that keeps the sandbox's namespaces
// alive. Killing it ends every process in the sandbox.
type Holder struct {
	PID          int // pid 1 of the sandbox, as seen from the substrate
	Version      Version
	Bwrap        string
	MapMode      string    // "identity" or "single-id"
	UIDMap       idmap.Map // the maps written, as the substrate's ids
	GIDMap       idmap.Map
	Degradations []string // what the sandbox lacks compared with its declaration
	Namespaces   []string // the namespaces it owns (/proc/PID/ns names), read from the holder itself

	cmd        *exec.Cmd
	pidfd      int          // pid 1 of the sandbox, to signal it and no process that reuses its pid; -1 none
	pidfdMu    sync.RWMutex // held for reading while pidfd is polled, for writing while Kill closes it
	hold       *os.File     // the write end of pid 1's stdin, never written
	stderr     *tail.Buffer
	stderrDone chan struct{}
	done       chan struct{}
	err        error
}

// ErrDied means bwrap exited before the sandbox was ready; the error text
// carries what bwrap printed.
var ErrDied = errors.New("bwrap exited before the sandbox was ready")

// readyLine is what the holder's payload prints once bwrap has finished the
// mount namespace and exec'd it
// (docs/failures.md#sessions-wait-until-the-holder-is-ready).
const readyLine = "ready"

// payload is pid 1 of the sandbox: a shell that runs builtins only, forever.
// It reaps every orphan (`wait` in dash, bash and ash waits for any child),
// and, being a namespace's init, ignores every signal sent from inside for
// which it has no handler, so an agent's `kill -9 -1` leaves the sandbox
// standing. It never execs a program after it started: the root filesystem
// is the agent's to rewrite, and anything pid 1 ran from it (a `sleep` from
// PATH, with its libc) would run the agent's code outside the sessions'
// seccomp filter (TestEscape_SharedFilesystem). What it waits on is a
// subshell, not a program: a read from the daemon's pipe, which never
// delivers a byte; if the agent kills the subshell, pid 1 forks another.
//
// bwrap passes its own descriptors on; pid 1 closes them, since the agent's
// root can open anything under /proc/1/fd.
var payload = "echo " + readyLine + "; exec 3<&0 >/dev/null 2>&1 </dev/null" + closeFDs() +
	"; while :; do { read -r _ <&3; } & wait; done"

// Shells take single-digit descriptors in redirections only; bwrap never gets
// more than fdData+3 from us (hosts file and apt configuration).
func closeFDs() string {
	var b strings.Builder
	for fd := fdArgs + 1; fd <= 9; fd++ { // fdArgs (3) now holds the daemon's pipe
		fmt.Fprintf(&b, " %d<&-", fd)
	}
	return b.String()
}

// Fixed descriptor numbers in bwrap's process.
const (
	fdArgs  = 3
	fdInfo  = 4
	fdBlock = 5
	fdData  = 6 // and up: one per DataFile
)

// Start builds the sandbox and returns once it can be joined. Any failure on
// the way kills what was spawned: no holder is ever leaked
// (docs/failures.md#failed-start-leaves-no-holder).
func Start(ctx context.Context, cfg Config) (*Holder, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Bwrap == "" {
		cfg.Bwrap = "bwrap"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 15 * time.Second
	}
	bwrapPath, v, err := Probe(ctx, cfg.Bwrap)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(cfg.Workdir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("workdir %q does not exist in the root filesystem: create it in the image or pass another --workdir", cfg.Workdir)
	}
	opts, data, err := buildOptions(v, &cfg)
	if err != nil {
		return nil, err
	}
	cu := cleanup.Make(func() {
		for _, f := range data {
			f.Close()
		}
	})
	defer cu.Clean()

	argsFile, err := memfd.New("bwrap-args", []byte(strings.Join(opts, "\x00")+"\x00"))
	if err != nil {
		return nil, err
	}
	cu.Add(func() { argsFile.Close() })
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("info pipe: %w", err)
	}
	cu.Add(func() { infoR.Close(); infoW.Close() })
	blockR, blockW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("block pipe: %w", err)
	}
	cu.Add(func() { blockR.Close(); blockW.Close() })
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("ready pipe: %w", err)
	}
	cu.Add(func() { readyR.Close(); readyW.Close() })
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cu.Add(func() { errR.Close(); errW.Close() })

	cmd := exec.Command(bwrapPath, "--args", fmt.Sprint(fdArgs), "--", "/bin/sh", "-c", payload)
	// bwrap's environment is pid 1's environment inside: PATH only
	// (docs/failures.md#helpers-and-pid-1-start-with-path-only).
	cmd.Env = []string{"PATH=" + childproc.DefaultPath}
	cmd.Dir = "/"
	// Stdin is a pipe the daemon holds and never writes: pid 1 blocks on it.
	holdR, holdW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("hold pipe: %w", err)
	}
	cu.Add(func() { holdR.Close(); holdW.Close() })
	cmd.Stdin = holdR
	cmd.Stdout = readyW
	cmd.Stderr = errW
	cmd.ExtraFiles = append([]*os.File{argsFile, infoW, blockR}, data...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}

	// pid 1 keeps whatever bwrap did not close, and a root agent opens
	// anything under /proc/1/fd (TestEscape_InheritedDescriptors).
	if err := closeInheritedOnExec(); err != nil {
		return nil, fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	var startErr error
	forkthread.Do(func() { startErr = cmd.Start() })
	if startErr != nil {
		return nil, fmt.Errorf("start %s: %w", bwrapPath, startErr)
	}
	h := &Holder{Version: v, Bwrap: bwrapPath, cmd: cmd, pidfd: -1, stderr: tail.New(8 << 10), stderrDone: make(chan struct{}), done: make(chan struct{})}
	cu.Add(h.Kill)
	go func() {
		io.Copy(h.stderr, errR)
		close(h.stderrDone)
	}()
	go func() {
		h.err = cmd.Wait()
		close(h.done)
	}()
	// Our copies of the child's ends must go, or EOF never comes.
	infoW.Close()
	blockR.Close()
	readyW.Close()
	holdR.Close()
	errW.Close()
	argsFile.Close()
	for _, f := range data {
		f.Close()
	}

	deadline := time.Now().Add(cfg.ReadyTimeout)
	info, err := readInfo(infoR, deadline)
	if err != nil {
		return nil, h.died(fmt.Errorf("read bwrap --info-fd: %w", err))
	}
	h.PID = info.ChildPID
	// bwrap waits on --userns-block-fd until the maps are written, so pid 1
	// is alive here and the descriptor names it and nothing else.
	if h.pidfd, err = unix.PidfdOpen(h.PID, 0); err != nil {
		h.pidfd = -1
		return nil, h.died(fmt.Errorf("open a pidfd for the sandbox's pid 1 (%d): %w", h.PID, err))
	}

	uid, gid, mode, err := writeMaps(h.PID, cfg.AllowDegraded)
	if err != nil {
		return nil, h.died(err)
	}
	h.MapMode, h.UIDMap, h.GIDMap = mode, uid, gid
	if mode != "identity" {
		h.Degradations = append(h.Degradations, "id map: single-id (the kernel refused the identity map; files of other users show as nobody)")
		log.Warn("sandbox degraded: single-id map", "uid_map", strings.TrimSpace(uid.String()), "gid_map", strings.TrimSpace(gid.String()))
	}
	if _, err := blockW.Write([]byte{1}); err != nil {
		return nil, h.died(fmt.Errorf("release bwrap's user namespace block: %w", err))
	}
	blockW.Close()

	if err := waitReady(readyR, deadline); err != nil {
		return nil, h.died(fmt.Errorf("wait for the sandbox's readiness line: %w", err))
	}
	if h.Namespaces, err = ownNamespaces(h.PID); err != nil {
		return nil, err
	}
	if !NewArgs(v).Has("--perms") {
		// Before any session: no agent code has run in the sandbox yet.
		if err := makeDataFilesReadable(h.PID, cfg.Files); err != nil {
			return nil, h.died(err)
		}
	}
	cu.Release()
	h.hold = holdW
	infoR.Close()
	readyR.Close()
	log.Info("sandbox ready", "pid", h.PID, "bwrap", v.String(), "id_map", mode, "namespaces", h.Namespaces)
	return h, nil
}

// closeInheritedOnExec marks every descriptor of this process from 3 up
// close-on-exec, so that bwrap, and pid 1 of the sandbox after it, get only
// the descriptors Start hands over in ExtraFiles. Go opens its own
// descriptors close-on-exec; the others are what the daemon's parent left
// open (a CI runner's pipe, a shell's fd 255, a harness's socket).
func closeInheritedOnExec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if err != unix.ENOSYS && err != unix.EINVAL {
		return err
	}
	// Before Linux 5.11: one descriptor at a time.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil || fd < 3 {
			continue
		}
		unix.CloseOnExec(fd)
	}
	return nil
}

// buildOptions is the whole bwrap option list, version-gated.
func buildOptions(v Version, cfg *Config) ([]string, []*os.File, error) {
	a := NewArgs(v)
	a.Add("--unshare-user").Add("--unshare-pid").Add("--unshare-ipc").
		Add("--unshare-uts").Add("--unshare-net").Add("--unshare-cgroup-try")
	a.Add("--die-with-parent").Add("--as-pid-1")
	a.AddFD("--info-fd", fdInfo).AddFD("--userns-block-fd", fdBlock)
	// pid 1 keeps one capability that sessions never have: the kernel then
	// refuses a session ptrace, /proc/1/mem and /proc/1/fd (access needs a
	// superset of the target's capabilities), so a root agent cannot write
	// itself into pid 1 or end the sandbox through it. CAP_WAKE_ALARM lets
	// pid 1 do nothing it could misuse: it only sets timers.
	a.Add("--cap-drop", "ALL").Add("--cap-add", "CAP_WAKE_ALARM")
	plan := &mountPlan{root: "/", cfg: cfg, firstFD: fdData}
	if err := plan.emit(a); err != nil {
		closeAll(plan.dataFDs)
		return nil, nil, err
	}
	a.Add("--chdir", cfg.Workdir)
	opts, err := a.Build()
	if err != nil {
		closeAll(plan.dataFDs)
		return nil, nil, err
	}
	return opts, plan.dataFDs, nil
}

func (p *mountPlan) dataFD(data []byte) (int, error) {
	f, err := memfd.New("bwrap-data", data)
	if err != nil {
		return 0, err
	}
	p.dataFDs = append(p.dataFDs, f)
	return p.firstFD + len(p.dataFDs) - 1, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

type bwrapInfo struct {
	ChildPID int `json:"child-pid"`
}

// readInfo reads bwrap's --info-fd until the JSON document is complete (a
// short read killed the sandbox:
// docs/failures.md#info-fd-read-to-the-end-of-its-json). EOF before that
// means bwrap died.
func readInfo(r *os.File, deadline time.Time) (bwrapInfo, error) {
	if err := r.SetReadDeadline(deadline); err != nil {
		return bwrapInfo{}, err
	}
	return parseInfo(r)
}

// parseInfo is readInfo without the clock, for fuzzing and tests.
func parseInfo(r io.Reader) (bwrapInfo, error) {
	var buf []byte
	chunk := make([]byte, 512)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		var info bwrapInfo
		if n > 0 && json.Valid(bytes.TrimSpace(buf)) {
			if jerr := json.Unmarshal(buf, &info); jerr != nil {
				return bwrapInfo{}, fmt.Errorf("decode %q: %w", buf, jerr)
			}
			if info.ChildPID <= 0 {
				return bwrapInfo{}, fmt.Errorf("no child-pid in %q", buf)
			}
			return info, nil
		}
		if err == io.EOF {
			if len(buf) == 0 {
				return bwrapInfo{}, fmt.Errorf("%w: it wrote nothing", ErrDied)
			}
			return bwrapInfo{}, fmt.Errorf("%w: incomplete info %q", ErrDied, buf)
		}
		if err != nil {
			return bwrapInfo{}, err
		}
		if len(buf) > 64<<10 {
			return bwrapInfo{}, fmt.Errorf("info larger than 64 KiB without a complete JSON document")
		}
	}
}

// writeMaps gives the sandbox's user namespace the identity map, or, only
// when allowed, the single-id map.
func writeMaps(pid int, allowDegraded bool) (uid, gid idmap.Map, mode string, err error) {
	ownUID, err := idmap.Own("uid")
	if err != nil {
		return nil, nil, "", err
	}
	ownGID, err := idmap.Own("gid")
	if err != nil {
		return nil, nil, "", err
	}
	uid, gid = ownUID.Identity(), ownGID.Identity()
	err = writeIdentity(pid)
	if err == nil {
		return uid, gid, "identity", nil
	}
	if !allowDegraded {
		return nil, nil, "", fmt.Errorf("%w (serve refuses a sandbox without the identity map; --allow-degraded accepts a single-id map)", err)
	}
	uid, gid = idmap.Single(uint32(os.Geteuid())), idmap.Single(uint32(os.Getegid()))
	// The uid map may already be in place; each file takes one write, so
	// write whichever is still missing.
	if cur, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid)); len(bytes.TrimSpace(cur)) == 0 {
		if err := idmap.Write(pid, uid, gid); err != nil {
			return nil, nil, "", err
		}
	} else if err := os.WriteFile(fmt.Sprintf("/proc/%d/gid_map", pid), []byte(gid.String()), 0); err != nil {
		return nil, nil, "", fmt.Errorf("write single-id gid_map for pid %d: %w", pid, err)
	}
	return uid, gid, "single-id", nil
}

// writeIdentity writes the identity maps; tests replace it to simulate a
// kernel that refuses them.
var writeIdentity = func(pid int) error {
	ownUID, err := idmap.Own("uid")
	if err != nil {
		return err
	}
	ownGID, err := idmap.Own("gid")
	if err != nil {
		return err
	}
	return idmap.Write(pid, ownUID.Identity(), ownGID.Identity())
}

// waitReady waits for the payload's readiness line.
func waitReady(r *os.File, deadline time.Time) error {
	if err := r.SetReadDeadline(deadline); err != nil {
		return err
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return ErrDied
		}
		return err
	}
	if strings.TrimSpace(line) != readyLine {
		return fmt.Errorf("unexpected readiness line %q", line)
	}
	return nil
}

// nsKinds are the namespaces a sandbox may own, by their /proc/PID/ns names.
// The sandbox must own all of the required ones: "owns a network namespace"
// is decided once, by the holder, and joining follows what the holder has
// (docs/failures.md#one-decision-on-owning-the-network-namespace).
var nsKinds = []struct {
	name     string
	required bool
}{
	{"user", true},
	{"mnt", true},
	{"pid", true},
	{"uts", true},
	{"ipc", true},
	{"net", true},
	{"cgroup", false},
}

// ownNamespaces lists the namespaces of pid that are not the caller's.
func ownNamespaces(pid int) ([]string, error) {
	var owned []string
	for _, k := range nsKinds {
		theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, k.name))
		ours, err2 := os.Readlink("/proc/self/ns/" + k.name)
		if err1 != nil || err2 != nil {
			if k.required {
				return nil, fmt.Errorf("read %s namespace of the holder: %v %v", k.name, err1, err2)
			}
			continue
		}
		if theirs != ours {
			owned = append(owned, k.name)
		} else if k.required {
			return nil, fmt.Errorf("the sandbox does not own a %s namespace; refusing to serve a sandbox that is not built as declared", k.name)
		}
	}
	return owned, nil
}

// died turns a setup failure into an error carrying bwrap's own words.
func (h *Holder) died(err error) error {
	h.Kill()
	select {
	case <-h.stderrDone:
	case <-time.After(time.Second): // a grandchild may hold the pipe
	}
	if msg := strings.TrimSpace(h.stderr.String()); msg != "" {
		return fmt.Errorf("%w; bwrap said: %s", err, msg)
	}
	return err
}

// Kill ends the sandbox and every process in it, and returns once they are
// gone. The sandbox's pid 1 exits only after the kernel has killed and reaped
// every process of its pid namespace, and bwrap exits only after its pid 1:
// so bwrap is left to exit by itself, and killed only if it does not.
func (h *Holder) Kill() {
	h.pidfdMu.RLock()
	if h.pidfd >= 0 {
		unix.PidfdSendSignal(h.pidfd, unix.SIGKILL, nil, 0)
	}
	h.pidfdMu.RUnlock()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		if h.cmd.Process != nil {
			h.cmd.Process.Kill()
		}
		<-h.done
	}
	if h.hold != nil {
		h.hold.Close()
	}
	h.pidfdMu.Lock()
	if h.pidfd >= 0 {
		unix.Close(h.pidfd)
		h.pidfd = -1
	}
	h.pidfdMu.Unlock()
}

// Pid1Exited says whether the sandbox's pid 1 has exited, which it does a
// moment before bwrap: its pidfd polls readable then. ok is false once Kill
// has closed the pidfd or if the poll fails; then ask /proc/PID/stat. Every
// session's start asks whether the sandbox lives, and reading pid 1's stat
// file for it was about 2% of the daemon's CPU under a hundred concurrent
// execs; this is one poll(2).
func (h *Holder) Pid1Exited() (exited, ok bool) {
	h.pidfdMu.RLock()
	defer h.pidfdMu.RUnlock()
	if h.pidfd < 0 {
		return false, false
	}
	ready := []unix.PollFd{{Fd: int32(h.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(ready, 0)
	if err != nil {
		return false, false
	}
	return n > 0, true
}

// makeDataFilesReadable makes the writable data files of the sandbox whose
// pid 1 is pid readable by every user, as bwrap from 0.5 on does with --perms
// (its data files are 0600 root otherwise). A read-only one keeps bwrap's
// mode: its bind cannot be changed.
func makeDataFilesReadable(pid int, files []DataFile) error {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer unix.Close(root)
	for _, f := range files {
		if f.ReadOnly {
			continue
		}
		fd, err := unix.Openat2(root, f.Path, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("open the sandbox's %s: %w", f.Path, err)
		}
		err = unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), 0o644)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("make the sandbox's %s readable: %w", f.Path, err)
		}
	}
	return nil
}

// Done is closed when bwrap has exited.
func (h *Holder) Done() <-chan struct{} { return h.done }

// Stderr is the tail of what bwrap printed.
func (h *Holder) Stderr() string { return h.stderr.String() }
