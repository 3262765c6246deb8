// Package join is the one way into the sandbox. Sessions, the file server,
// the image's entrypoint and listeners inside the sandbox's network all enter
// through here, so that what a joined process can see and do is decided in a
// single place.
//
// A session is entered in two steps:
//
//	nsenter --target HOLDER --user --mount --pid --uts --ipc --net [--cgroup] -- /proc/self/fd/3
//	  └─ fd 3 is this very binary (static, opened in the substrate): the "enter" child
//	       sets the process group / controlling terminal, forbids new user
//	       namespaces, bounds the capability set, drops to the user, changes to
//	       the working directory *inside*, and execs the command with exactly
//	       the environment it was given.
//
// Nothing between nsenter and the command is executed from the sandbox's
// filesystem. A root agent can replace /usr/bin/setpriv or libc inside the
// sandbox; a wrapper loaded from there would run the agent's code with full
// capabilities in the sandbox's user namespace, which is enough to unmount
// the masks over the harness and the verdict (lessons 39 and 54).
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/join/ ./internal/daemon/ -run 'Lesson|Escape'
package join

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/memfd"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// Target is a running sandbox as seen from the substrate.
type Target struct {
	PID        int      // the holder: pid 1 of the sandbox
	Namespaces []string // nsenter flags, from bwrap.Holder.Namespaces
}

// Spec is one process to start inside the sandbox.
type Spec struct {
	User idmap.User
	Env  []string // the exact environment of the command
	Dir  string   // working directory, resolved inside the sandbox
	Argv []string // argv[0] is looked up in the PATH of Env, unless Path is set
	// Path, when set, is the program to execute, and Argv[0] only the name it
	// is given: a login shell is /bin/bash started as "-bash".
	Path string
	// TTY says that stdin, stdout and stderr are one terminal, which becomes
	// the session's controlling terminal in a session of its own.
	TTY bool
	// Caps is the bounding capability set; nil means DefaultCaps.
	Caps []string
}

// DefaultCaps is Docker's default capability set less CAP_NET_RAW: a root
// agent owns the sandbox's mount namespace, so CAP_SYS_ADMIN would let it
// unmount the masks (lesson 54); CAP_NET_RAW and CAP_NET_ADMIN would let it
// sniff or redirect the verifier's traffic (lesson 14).
var DefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
}

// Exit codes of a setup failure, following docker run and env(1).
const (
	ExitSetup       = 125 // sandboxd could not set the process up
	ExitNotRunnable = 126 // the command exists but cannot be executed
	ExitNotFound    = 127 // the command was not found
)

// SetupError is a failure before the command ran, reported by the enter
// child with the reason (lesson 26).
type SetupError struct {
	Code int
	Msg  string
}

func (e *SetupError) Error() string { return e.Msg }

// enterSpec travels to the enter child through a memfd, so that nothing of it
// shows in the child's command line.
type enterSpec struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	Argv   []string `json:"argv"`
	Path   string   `json:"path,omitempty"`
	TTY    bool     `json:"tty"`
	Caps   []string `json:"caps"`
}

// Process is a started joined process.
type Process struct {
	Cmd *exec.Cmd // nsenter, in the substrate
	// PID is the command's pid in the substrate: the leader of its own process
	// group, the one to signal.
	PID int
}

var (
	selfOnce sync.Once
	selfFile *os.File
	selfErr  error
)

// self is this binary, opened once in the substrate.
func self() (*os.File, error) {
	selfOnce.Do(func() {
		selfFile, selfErr = os.Open("/proc/self/exe")
	})
	return selfFile, selfErr
}

// Command prepares the nsenter process for spec. The caller sets Stdin,
// Stdout and Stderr and calls Start on the result.
func (t Target) Command(s Spec) (*Starter, error) {
	nsenter, err := Nsenter()
	if err != nil {
		return nil, err
	}
	argv := append([]string{"--target", strconv.Itoa(t.PID)}, t.Namespaces...)
	argv = append(argv, "--", "/proc/self/fd/3")
	st, err := enterCommand(nsenter, argv, s)
	if err != nil {
		return nil, err
	}
	// The child nsenter forks lives for a moment in the sandbox's pid
	// namespace, where any agent can read its command line: name it
	// "nsenter", never by the pinned copy's path in the harness dir
	// (TestEscape_HarnessProcess).
	st.Cmd.Args[0] = "nsenter"
	return st, nil
}

// Here prepares spec to run in the caller's own namespaces, through the same
// enter step as a session: the visitor launcher uses it once it has built its
// own mount namespace, so that the verifier drops its privileges exactly as
// sessions do.
func Here(s Spec) (*Starter, error) {
	return enterCommand("/proc/self/fd/3", nil, s)
}

func enterCommand(path string, args []string, s Spec) (*Starter, error) {
	if len(s.Argv) == 0 {
		return nil, &SetupError{Code: ExitSetup, Msg: "no command given: name the program to run"}
	}
	exe, err := self()
	if err != nil {
		return nil, fmt.Errorf("open own executable: %w", err)
	}
	caps := s.Caps
	if caps == nil {
		caps = DefaultCaps
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	spec, err := json.Marshal(enterSpec{
		UID: s.User.UID, GID: s.User.GID, Groups: s.User.Groups,
		Env: s.Env, Dir: dir, Argv: s.Argv, Path: s.Path, TTY: s.TTY, Caps: caps,
	})
	if err != nil {
		return nil, err
	}
	specFile, err := memfd.New("spec", spec)
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specFile.Close()
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = childproc.Environ(roleEnter)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{exe, specFile, statusW}
	// The joined process gets a session of its own and no controlling
	// terminal; the command takes the terminal inside (see enter).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return &Starter{Cmd: cmd, spec: specFile, statusR: statusR, statusW: statusW}, nil
}

// Starter is a prepared joined process.
type Starter struct {
	Cmd     *exec.Cmd
	spec    *os.File
	statusR *os.File
	statusW *os.File
}

// Start starts nsenter and waits until the command has been exec'd or has
// failed to start. A failure is a *SetupError with the reason; the caller
// must still Wait on Cmd.
func (s *Starter) Start() (*Process, error) {
	err := s.Cmd.Start()
	s.spec.Close()
	s.statusW.Close()
	defer s.statusR.Close()
	if err != nil {
		return nil, fmt.Errorf("start nsenter: %w", err)
	}
	// nsenter's own process keeps a copy of the status pipe for as long as it
	// waits, so EOF cannot mean success: the enter child writes "ok" right
	// before exec, or a code and the reason when setup failed.
	line, err := bufio.NewReader(io.LimitReader(s.statusR, 64<<10)).ReadString('\n')
	switch {
	case line == statusOK+"\n":
	case len(line) > 0:
		return nil, decodeStatus([]byte(line))
	default:
		return nil, &SetupError{Code: ExitSetup, Msg: fmt.Sprintf("could not enter the sandbox (%v): it may have ended; see sandboxd status", err)}
	}
	p := &Process{Cmd: s.Cmd}
	p.PID = s.Cmd.Process.Pid
	if filepath.Base(s.Cmd.Path) == "nsenter" {
		p.PID = childOf(p.PID) // nsenter forks the process that becomes the command
	}
	if p.PID == 0 {
		// The command already ended and was reaped by nsenter.
		p.PID = -1
	}
	return p, nil
}

func decodeStatus(msg []byte) error {
	code, text, ok := bytes.Cut(msg, []byte{' '})
	n, err := strconv.Atoi(string(code))
	if !ok || err != nil {
		return &SetupError{Code: ExitSetup, Msg: strings.TrimSpace(string(msg))}
	}
	return &SetupError{Code: n, Msg: strings.TrimSpace(string(text))}
}

// childOf finds nsenter's forked child, which became the command.
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
		return 0
	}
	// Kernels without CONFIG_PROC_CHILDREN: scan for the parent link.
	for _, p := range allPIDs() {
		if ppid, ok := parentOf(p); ok && ppid == pid {
			return p
		}
	}
	return 0
}

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.PID <= 0 {
		return errors.New("process already ended")
	}
	return unix.Kill(-p.PID, sig)
}

// ExitStatus converts nsenter's wait result into the command's status: nsenter
// exits with the command's code, or kills itself with the command's signal.
func ExitStatus(err error) (code int, signal syscall.Signal, ok bool) {
	if err == nil {
		return 0, 0, true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, 0, false
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal(), true
	}
	return ws.ExitStatus(), 0, true
}
