package join

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/forkthread"
)

// Cmd is a child role of this binary (see childproc) started inside some of
// the sandbox's namespaces, or in the daemon's own when none are named. It is
// the small part of exec.Cmd the daemon needs, started by forkJoined.
//
// The child's descriptors are stdin, stdout and stderr, then this binary at
// descriptor 3 (a role that starts another joined process execs it from
// there), then ExtraFiles from 4 on.
type Cmd struct {
	Stdin  io.Reader // nil: /dev/null
	Stdout io.Writer // nil: /dev/null
	Stderr io.Writer // nil: /dev/null

	ExtraFiles []*os.File
	// Setsid gives the child a session of its own; Setpgid, a process group.
	Setsid, Setpgid bool
	// Pdeathsig is sent to the child if the daemon dies first.
	Pdeathsig syscall.Signal
	// NewPIDNamespace starts the child as pid 1 of a pid namespace of its
	// own, made after joining the user namespace (so owned by it): it sees
	// only its own descendants, never the daemon, and when it ends the
	// kernel ends every process left in that namespace.
	NewPIDNamespace bool
	// WaitDelay bounds how long Wait waits, after the process has exited,
	// for Stdout and Stderr to be copied (a grandchild may hold the pipe).
	WaitDelay time.Duration

	// Process is the started child, in the substrate's pid namespace, and
	// ProcessState its end, once Wait has returned.
	Process      *os.Process
	ProcessState *os.ProcessState

	target     Target
	namespaces []string
	role       string
	args       []string
	enter      *enterPlan // instead of a role: become the agent's command

	closeAfterStart []io.Closer
	closeAfterWait  []io.Closer
	copying         sync.WaitGroup
	copyErr         error
	copyErrOnce     sync.Once
	waited          bool
}

// Join prepares role to run inside the given namespaces of the sandbox
// (names as in /proc/PID/ns; nil means every namespace it owns), with args
// after its argv[0].
func (t Target) Join(namespaces []string, role string, args ...string) *Cmd {
	if namespaces == nil {
		namespaces = t.Namespaces
	}
	return &Cmd{target: t, namespaces: namespaces, role: role, args: args}
}

// joinOrder is the order namespaces are joined in: the user namespace first,
// since it grants the capabilities that joining the others takes; the mount
// namespace last, since joining it changes the root the others' files were
// opened from (they are all opened before the fork anyway).
var joinOrder = []string{"user", "cgroup", "ipc", "uts", "net", "pid", "mnt"}

// Start forks the child, joins it to the namespaces and execs the role. It
// returns once the role runs, or with the reason it could not.
func (c *Cmd) Start() error {
	if c.Process != nil {
		return errors.New("join: already started")
	}
	// (A closure: the list grows below.)
	defer func() { closeAll(c.closeAfterStart) }()
	var exe *os.File
	ownBinary := c.enter == nil || c.enter.self
	if ownBinary {
		var err error
		if exe, err = self(); err != nil {
			return fmt.Errorf("open own executable: %w", err)
		}
	}
	plan := &forkPlan{exe: 3, setsid: c.Setsid, setpgid: c.Setpgid, pdeathsig: c.Pdeathsig, parent: os.Getpid(), record: new([2]int32), enter: c.enter, newPIDNS: c.NewPIDNamespace}
	if c.enter != nil {
		for _, f := range c.target.Limits.Cgroup {
			plan.cgroup = append(plan.cgroup, int(f.Fd()))
		}
	}

	for _, kind := range joinOrder {
		if !slices.Contains(c.namespaces, kind) {
			continue
		}
		f := c.target.held[kind]
		if f == nil {
			var err error
			if f, err = os.Open(fmt.Sprintf("/proc/%d/ns/%s", c.target.PID, kind)); err != nil {
				return fmt.Errorf("open the sandbox's %s namespace: %w (has it ended? see sandboxd status)", kind, err)
			}
			c.closeAfterStart = append(c.closeAfterStart, f)
		}
		plan.namespaces = append(plan.namespaces, int(f.Fd()))
		plan.pidNS = plan.pidNS || kind == "pid"
	}
	for _, kind := range c.namespaces {
		if !slices.Contains(joinOrder, kind) {
			return fmt.Errorf("join: unknown namespace %q", kind)
		}
	}

	stdio, err := c.stdio()
	if err != nil {
		closeAll(c.closeAfterWait)
		return err
	}
	for _, f := range stdio {
		plan.files = append(plan.files, int(f.Fd()))
	}
	if ownBinary {
		plan.files = append(plan.files, int(exe.Fd()))
		for _, f := range c.ExtraFiles {
			plan.files = append(plan.files, int(f.Fd()))
		}
	}
	if c.enter == nil {
		if plan.argv, err = syscall.SlicePtrFromStrings(append([]string{"sandboxd-" + c.role}, c.args...)); err != nil {
			return err
		}
		if plan.envv, err = syscall.SlicePtrFromStrings(childproc.Environ(c.role)); err != nil {
			return err
		}
	}
	reportR, reportW, err := reportPipe()
	if err != nil {
		return fmt.Errorf("join: report pipe: %w", err)
	}
	defer reportR.Close()
	plan.report = reportW

	var pid int
	var errno syscall.Errno
	fork := func() {
		pid, errno = forkInTurn(plan)
	}
	if c.Pdeathsig != 0 {
		// The signal fires when the forking *thread* ends
		// (docs/failures.md#holder-outlives-its-starting-thread).
		forkthread.Do(fork)
	} else {
		fork()
	}
	unix.Close(reportW)
	if errno != 0 {
		closeAll(c.closeAfterWait)
		return fmt.Errorf("join: fork: %w", errno)
	}
	// The child has its copies: the files may be closed from here on.
	runtime.KeepAlive(stdio)
	runtime.KeepAlive(c.ExtraFiles)
	runtime.KeepAlive(c.target.Limits.Cgroup)
	runtime.KeepAlive(c.target.held)

	// The report: the pid of the second copy when there is one, then a
	// failure if one happened; EOF once the role has been exec'd (or every
	// copy has exited).
	cmdPID, stage, failErr := pid, int32(0), syscall.Errno(0)
	var rec [8]byte
	for {
		if _, err := io.ReadFull(reportR, rec[:]); err != nil {
			break
		}
		first, second := int32(binary.NativeEndian.Uint32(rec[:4])), int32(binary.NativeEndian.Uint32(rec[4:]))
		if first > 0 {
			cmdPID = int(first)
		} else {
			stage, failErr = -first, syscall.Errno(second)
		}
	}
	if plan.pidNS || plan.newPIDNS {
		// The first copy only forked the second; it is gone or going.
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		if cmdPID == pid {
			cmdPID = 0
		}
	}
	if stage != 0 || cmdPID == 0 {
		if cmdPID > 0 {
			var ws unix.WaitStatus
			unix.Wait4(cmdPID, &ws, 0, nil)
		}
		closeAll(c.closeAfterWait)
		if c.enter != nil && (stage == stageExec || stage >= stageTerminal) {
			return c.enter.failure(stage, failErr)
		}
		return &SetupError{Code: ExitSetup, Msg: forkFailure(stage, failErr)}
	}
	c.Process, err = os.FindProcess(cmdPID)
	if err != nil {
		closeAll(c.closeAfterWait)
		return err
	}
	return nil
}

func forkFailure(stage int32, errno syscall.Errno) string {
	what := map[int32]string{
		stageSetns:       "join the sandbox's namespaces",
		stageUnshare:     "make a pid namespace",
		stageCgroup:      "join the agent's cgroup",
		stageFork:        "fork into the sandbox's pid namespace",
		stageSession:     "start a session",
		stageDescriptors: "pass descriptors",
		stageExec:        "exec sandboxd's own binary",
		stageSockets:     "pass the sockets made inside the sandbox back",
	}[stage]
	if what == "" {
		what = "start inside the sandbox"
	}
	return fmt.Sprintf("could not %s (%v): the sandbox may have ended; see sandboxd status", what, errno)
}

// stdio opens the child's descriptors 0–2: the caller's files as they are,
// /dev/null for nil, and a pipe with a copying goroutine for anything else.
func (c *Cmd) stdio() ([]*os.File, error) {
	var files []*os.File
	// stdin
	switch r := c.Stdin.(type) {
	case nil:
		f, err := c.devNull(os.O_RDONLY)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	case *os.File:
		files = append(files, r)
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		c.closeAfterStart = append(c.closeAfterStart, pr)
		c.closeAfterWait = append(c.closeAfterWait, pw)
		files = append(files, pr)
		go func() {
			io.Copy(pw, r)
			pw.Close()
		}()
	}
	// stdout, and stderr (sharing stdout's pipe when it is the same writer,
	// so that one goroutine writes to it)
	var outPipe *os.File
	for i, w := range []io.Writer{c.Stdout, c.Stderr} {
		switch w := w.(type) {
		case nil:
			f, err := c.devNull(os.O_WRONLY)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		case *os.File:
			files = append(files, w)
		default:
			if i == 1 && outPipe != nil && sameWriter(c.Stdout, c.Stderr) {
				files = append(files, outPipe)
				continue
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			c.closeAfterStart = append(c.closeAfterStart, pw)
			c.closeAfterWait = append(c.closeAfterWait, pr)
			files = append(files, pw)
			outPipe = pw
			c.copying.Add(1)
			go func() {
				defer c.copying.Done()
				if _, err := io.Copy(w, pr); err != nil && !errors.Is(err, os.ErrClosed) {
					c.copyErrOnce.Do(func() { c.copyErr = err })
				}
			}()
		}
	}
	return files, nil
}

// devNull opens /dev/null for the child, to be closed once it has started.
func (c *Cmd) devNull(flag int) (*os.File, error) {
	f, err := os.OpenFile(os.DevNull, flag, 0)
	if err == nil {
		c.closeAfterStart = append(c.closeAfterStart, f)
	}
	return f, err
}

// sameWriter is a == b for writers that can be compared.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() { recover() }()
	return a == b
}

// Wait waits for the child to exit and for its output to be copied. A
// non-zero exit is an *exec.ExitError, as from exec.Cmd.
func (c *Cmd) Wait() error {
	if c.Process == nil {
		return errors.New("join: not started")
	}
	if c.waited {
		return errors.New("join: Wait was already called")
	}
	c.waited = true
	awaitExit(c.Process.Pid)
	state, err := c.Process.Wait()
	c.ProcessState = state
	copied := make(chan struct{})
	go func() { c.copying.Wait(); close(copied) }()
	if c.WaitDelay > 0 {
		select {
		case <-copied:
		case <-time.After(c.WaitDelay):
			// Something the child started still holds the output: stop
			// copying what it writes.
			closeAll(c.closeAfterWait)
		}
	}
	<-copied
	closeAll(c.closeAfterWait)
	if err != nil {
		return err
	}
	if !state.Success() {
		return &exec.ExitError{ProcessState: state}
	}
	return c.copyErr
}

func closeAll[T io.Closer](cs []T) {
	for _, c := range cs {
		c.Close()
	}
}
