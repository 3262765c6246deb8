// Package join is the one way into the sandbox. Sessions, the file server,
// the image's entrypoint and listeners inside the sandbox's network all enter
// through here, so that what a joined process can see and do is decided in a
// single place.
//
// A session is entered by one fork of the daemon (fork_linux.go): the copy
// joins the holder's namespaces (setns, user first), forks once more into the
// pid namespace, and then takes the enter step (enter_linux.go) with raw
// system calls: its own session and terminal, a seccomp filter against new
// user namespaces, the bounded capability set, the agent's limits, the
// user's ids, the working directory resolved *inside*; then it execs the
// command with exactly the environment it was given. Child roles of this
// binary (the visitor, the netns helper) are joined the same way and exec
// the binary sealed in memory (Pin).
//
// Nothing between the daemon and the command is executed from the filesystem
// the agent can write: not nsenter, not setpriv, not a dynamic loader, not
// libc. A root agent can replace any of them or /etc/ld.so.preload; a helper
// loaded from there would run the agent's code with full capabilities in the
// sandbox's user namespace (enough to unmount the masks over the harness and
// the verdict), or as the container's root
// (docs/failures.md#root-helpers-run-nothing-the-agent-wrote).
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/join/ ./internal/daemon/ ./test/attack/
package join

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// Target is a running sandbox as seen from the substrate.
type Target struct {
	PID        int      // the holder: pid 1 of the sandbox
	Namespaces []string // the namespaces it owns, by /proc/PID/ns name (bwrap.Holder.Namespaces)
	// Limits apply to every process started by Command: the agent's side.
	Limits Limits

	// held are the namespaces Hold opened, by name.
	held map[string]*os.File
}

// Hold opens the target's namespaces once, for every join after it: no
// /proc lookups per session, and no joining another process that gets the
// holder's pid should the holder end. Release closes them, once nothing
// joins any more.
func (t *Target) Hold() error {
	held := map[string]*os.File{}
	for _, kind := range t.Namespaces {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", t.PID, kind))
		if err != nil {
			closeAll(slices.Collect(maps.Values(held)))
			return fmt.Errorf("open the sandbox's %s namespace: %w", kind, err)
		}
		held[kind] = f
	}
	t.held = held
	return nil
}

// Release closes what Hold opened.
func (t *Target) Release() {
	closeAll(slices.Collect(maps.Values(t.held)))
	t.held = nil
}

// Limits bound the agent's processes where no cgroup can be had (a plain
// Docker container's cgroups are read-only inside), so that a fork bomb or
// a memory blow-up takes the agent down before the daemon.
type Limits struct {
	// OOMScoreAdj makes the kernel's OOM killer pick the agent's processes
	// first (raising one's own score needs no privilege).
	OOMScoreAdj int
	// MaxProcs is RLIMIT_NPROC for a non-root agent user: the processes its
	// uid may have at once. The kernel exempts root from it.
	MaxProcs uint64
	// Cgroup are the files of the agent's cgroup that a process writes "0"
	// into to join it, open for writing (internal/cgroup's JoinFiles: tasks
	// on v1, cgroup.procs on v2): the forked copy, single-threaded, joins
	// it before anything else, so that the command and all it starts are
	// inside.
	Cgroup []*os.File
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
	// Role, when set, makes the command a child role of this binary (see
	// childproc), executed from the copy pinned in memory after the same
	// enter step as any session: a server of sandboxd's own (the file
	// server) that runs as User, inside the sandbox's view, and runs no
	// program of the image. Argv are then its arguments after argv[0], and
	// it gets childproc.Environ(Role) instead of Env.
	Role string
}

// DefaultCaps is Docker's default capability set less CAP_NET_RAW: a root
// agent owns the sandbox's mount namespace, so CAP_SYS_ADMIN would let it
// unmount the masks (docs/failures.md#root-agent-cannot-undo-the-masks);
// CAP_NET_RAW and CAP_NET_ADMIN would let it sniff or redirect the verifier's
// traffic (docs/failures.md#no-raw-or-admin-network-capabilities).
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
// child with the reason (docs/failures.md#setup-failures-carry-the-reason).
type SetupError struct {
	Code int
	Msg  string
}

func (e *SetupError) Error() string { return e.Msg }

// Process is a started joined process.
type Process struct {
	Cmd *Cmd
	// PID is the command's pid in the substrate: the leader of its own process
	// group, the one to signal.
	PID int
}

// Command prepares spec to run inside every namespace of the sandbox, as the
// agent's side (with t's Limits). The caller sets Stdin, Stdout and Stderr on
// the result's Cmd and calls Start.
func (t Target) Command(s Spec) (*Starter, error) {
	return enterCommand(t.Join(nil, ""), s, t.Limits)
}

// Here prepares spec to run in the caller's own namespaces, through the same
// enter step as a session: the visitor launcher uses it once it has built its
// own mount namespace, so that the verifier drops its privileges exactly as
// sessions do.
func Here(s Spec) (*Starter, error) {
	return enterCommand(Target{}.Join([]string{}, ""), s, Limits{})
}

func enterCommand(cmd *Cmd, s Spec, limits Limits) (*Starter, error) {
	e, err := planEnter(s, limits)
	if err != nil {
		return nil, err
	}
	cmd.enter = e
	// A session of its own, so that no terminal of the daemon's is the
	// command's and signals reach the whole command and nothing of ours;
	// with a terminal, the enter step makes it the session's.
	cmd.Setsid = true
	return &Starter{Cmd: cmd}, nil
}

// Starter is a prepared joined process.
type Starter struct {
	Cmd *Cmd
}

// Start starts the command. It returns once the command has been exec'd, or
// with a *SetupError that says why it could not be; the caller must still
// Wait on Cmd.
func (s *Starter) Start() (*Process, error) {
	if err := s.Cmd.Start(); err != nil {
		return nil, err
	}
	return &Process{Cmd: s.Cmd, PID: s.Cmd.Process.Pid}, nil
}

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.PID <= 0 {
		return errors.New("process already ended")
	}
	return unix.Kill(-p.PID, sig)
}

// ExitStatus converts Cmd.Wait's result into the command's exit code (128+N
// for a signal), the signal, and whether err was an exit status at all.
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
