// Package ptyrelay runs one command inside the sandbox, with a terminal or
// with pipes, and relays its streams to whoever asked for it: the SSH server
// and the control socket's exec both start their sessions here, so what a
// terminal is and when a session is over are decided once.
//
// The rules it keeps, each against a failure that docs/failures.md describes:
//
//   - A pty comes from the sandbox's own devpts, and is the command's
//     controlling terminal with the requested size, TERM and modes
//     (docs/failures.md#pty-request-gives-a-terminal,
//     docs/failures.md#controlling-terminal-and-foreground-group,
//     docs/failures.md#ptys-come-from-the-sandbox-devpts).
//   - A resize never touches the input stream
//     (docs/failures.md#resize-never-ends-input).
//   - Output is relayed as it is produced, through fixed buffers: a slow
//     reader slows the command down instead of growing memory
//     (docs/failures.md#output-streams-and-survives-a-timeout).
//   - Wait returns the exit status only after every byte of output has been
//     handed to the writers, so a caller can send exit-status before EOF
//     (docs/failures.md#exit-status-before-eof-and-close).
//   - the command is reaped by its own join.Cmd, never by a reaper
//     (docs/failures.md#reaper-never-takes-a-session-exit-status).
//   - Closing the client's stdin closes the command's stdin, for pipes
//     (docs/failures.md#stdin-eof-reaches-the-command). For a pty the
//     client's EOF is ignored, as sshd does: the terminal stays open and a
//     ^D typed by the user is what ends a shell.
//   - Setup failures come back as *join.SetupError with the reason
//     (docs/failures.md#setup-failures-carry-the-reason).
//   - Kill freezes and kills the whole tree, and what it printed before is
//     still delivered (docs/failures.md#timeout-kills-the-whole-tree,
//     docs/failures.md#output-streams-and-survives-a-timeout).
//
// A session is over when its leader has exited and its output has gone quiet:
// background processes that still hold the output (`srv &`) are not waited
// for, and, with Leftovers, their output is read and discarded afterwards so
// that they do not die of SIGPIPE
// (docs/failures.md#background-processes-outlive-their-command).
package ptyrelay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/join"
)

// Config is one session to start.
type Config struct {
	Target join.Target
	// Spec is the command; Spec.TTY is set from PTY, and TERM is added to
	// Spec.Env for a pty.
	Spec join.Spec
	// PTY asks for a terminal; nil runs the command with pipes.
	PTY *PTY
	// Stdin is the client's input; nil means the command reads EOF at once.
	Stdin io.Reader
	// Stdout receives the command's output (with a pty, everything).
	Stdout io.Writer
	// Stderr receives the command's standard error when there is no pty;
	// nil sends it to Stdout.
	Stderr io.Writer
	// Leftovers adopts output pipes still held by background processes once
	// the session is over; nil closes them, and those processes get EPIPE.
	Leftovers *Leftovers
	// DrainQuiet is how long output may pause after the leader exited before
	// the session counts as over; DrainMax bounds that whole tail. Zero means
	// DefaultDrainQuiet and DefaultDrainMax.
	DrainQuiet, DrainMax time.Duration
}

// Defaults for the output tail after the leader's exit. The tail is what a
// background process still prints: with the leader gone, what the command
// itself printed is already in the pipe or the terminal's buffer, and is read
// long before the quiet period ends.
const (
	DefaultDrainQuiet = 50 * time.Millisecond
	DefaultDrainMax   = time.Second
)

// PTY is a terminal request.
type PTY struct {
	Term  string // TERM for the command; empty leaves Spec.Env as it is
	Size  Size
	Modes []byte // RFC 4254 §8 encoded terminal modes
	// EndInputWithEOF types the terminal's end-of-file character (^D) at
	// the end of Stdin, as a user at the terminal would: a client whose
	// input is a pipe or a file, not a terminal, then ends the command's
	// input instead of leaving it waiting. SSH leaves this to the client,
	// as sshd does.
	EndInputWithEOF bool
}

// Exit is how a session's command ended.
type Exit struct {
	Code   int            // exit code; 128+N when killed by signal N
	Signal syscall.Signal // the signal that killed it, or 0
	Core   bool           // it dumped core
	Err    error          // the status could not be read (Code is then 255)
	// Rusage is what wait4 reported the command used, or nil.
	Rusage *syscall.Rusage
}

// SignalName is the signal's name without "SIG", as SSH's exit-signal
// carries it ("KILL"), or "" when the command exited by itself.
func (e Exit) SignalName() string {
	if e.Signal == 0 {
		return ""
	}
	return SignalName(e.Signal)
}

// SignalName is sig's name without "SIG" ("TERM").
func SignalName(sig syscall.Signal) string {
	name := unix.SignalName(sig)
	if name == "" {
		return fmt.Sprintf("SIG%d", int(sig))[3:]
	}
	return strings.TrimPrefix(name, "SIG")
}

// ParseSignal is the inverse of SignalName; it accepts "TERM" and "SIGTERM".
func ParseSignal(name string) (syscall.Signal, bool) {
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	return sig, sig != 0
}

// ErrNoPTY is returned by terminal operations on a session run with pipes.
var ErrNoPTY = errors.New("the session has no terminal")

// Session is one started command and the goroutines relaying its streams.
type Session struct {
	cfg  Config
	cmd  *join.Cmd
	proc *join.Process
	pty  *pty

	stdinW *os.File   // our end of the command's stdin pipe, nil with a pty
	outs   []*os.File // our ends of stdout and stderr, or the pty master
	outEOF []bool     // outs[i] read to its end: no process can write to it any more

	exited atomic.Bool
	exitAt time.Time // set before exited is

	stdinDone chan struct{}
	outWG     sync.WaitGroup
	done      chan struct{} // closed once exit is final and output relayed
	exit      Exit
	outErr    atomic.Pointer[error]
}

// Start starts the command and its relays. A setup failure inside the
// sandbox is a *join.SetupError carrying the reason and the exit code to
// report (127 for a command not found, …).
func Start(cfg Config) (*Session, error) {
	if cfg.Stdout == nil {
		return nil, errors.New("ptyrelay: Config.Stdout is required")
	}
	if cfg.DrainQuiet <= 0 {
		cfg.DrainQuiet = DefaultDrainQuiet
	}
	if cfg.DrainMax <= 0 {
		cfg.DrainMax = DefaultDrainMax
	}
	spec := cfg.Spec
	spec.Env = append([]string(nil), cfg.Spec.Env...)
	spec.TTY = cfg.PTY != nil

	s := &Session{cfg: cfg, stdinDone: make(chan struct{}), done: make(chan struct{})}
	// childEnds are the descriptors the command gets; ours must be closed
	// once it has them, or EOF never comes.
	var childEnds, ourEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	var stdin, stdout, stderr *os.File
	if cfg.PTY != nil {
		if cfg.PTY.Term != "" {
			spec.Env = setEnv(spec.Env, "TERM", cfg.PTY.Term)
		}
		p, err := openPTY(cfg.Target.PID, spec.User.UID, spec.User.GID)
		if err != nil {
			return nil, err
		}
		if err := setTermios(p.slave, cfg.PTY.Modes); err != nil {
			p.master.Close()
			p.slave.Close()
			return nil, err
		}
		if err := setSize(p.master, cfg.PTY.Size); err != nil {
			p.master.Close()
			p.slave.Close()
			return nil, err
		}
		s.pty = p
		stdin, stdout, stderr = p.slave, p.slave, p.slave
		childEnds = []*os.File{p.slave}
		ourEnds = []*os.File{p.master}
		s.outs = []*os.File{p.master}
	} else {
		var err error
		if cfg.Stdin != nil {
			var w *os.File
			if stdin, w, err = os.Pipe(); err != nil {
				return nil, fmt.Errorf("stdin pipe: %w", err)
			}
			s.stdinW = w
			ourEnds = append(ourEnds, w)
		} else if stdin, err = os.Open(os.DevNull); err != nil {
			return nil, fmt.Errorf("open %s for stdin: %w", os.DevNull, err)
		}
		childEnds = append(childEnds, stdin)
		outR, outW, err := os.Pipe()
		if err != nil {
			closeAll(childEnds)
			closeAll(ourEnds)
			return nil, fmt.Errorf("stdout pipe: %w", err)
		}
		growPipe(outW)
		stdout, stderr = outW, outW
		childEnds = append(childEnds, outW)
		ourEnds = append(ourEnds, outR)
		s.outs = []*os.File{outR}
		if cfg.Stderr != nil {
			errR, errW, err := os.Pipe()
			if err != nil {
				closeAll(childEnds)
				closeAll(ourEnds)
				return nil, fmt.Errorf("stderr pipe: %w", err)
			}
			stderr = errW
			childEnds = append(childEnds, errW)
			ourEnds = append(ourEnds, errR)
			s.outs = append(s.outs, errR)
		}
	}

	starter, err := cfg.Target.Command(spec)
	if err != nil {
		closeAll(childEnds)
		closeAll(ourEnds)
		return nil, err
	}
	starter.Cmd.Stdin, starter.Cmd.Stdout, starter.Cmd.Stderr = stdin, stdout, stderr
	proc, err := starter.Start()
	// The command holds its own copies now (or never will).
	closeAll(childEnds)
	if err != nil {
		closeAll(ourEnds)
		// A started command is our child either way; reap it here, by its pid
		// (docs/failures.md#reaper-never-takes-a-session-exit-status).
		starter.Cmd.Wait()
		return nil, err
	}
	s.cmd, s.proc = starter.Cmd, proc

	writers := []io.Writer{cfg.Stdout, cfg.Stderr}
	s.outEOF = make([]bool, len(s.outs))
	for i, f := range s.outs {
		s.outWG.Add(1)
		go s.relayOut(f, writers[i], &s.outEOF[i])
	}
	if cfg.Stdin != nil {
		go s.relayIn(cfg.Stdin)
	} else {
		close(s.stdinDone)
	}
	go s.waitExit()
	return s, nil
}

// growPipe enlarges the output pipe to 1 MiB where the system allows it:
// fewer wake-ups at full speed, and a timed-out command has more of its
// last output already waiting when it is killed. Failure only costs speed.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20)
	})
}

func setEnv(env []string, key, value string) []string {
	prefix := key + "="
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return append(out, prefix+value)
}

// relayBuffers holds the relays' buffers between sessions. Each session took
// three fresh ones (stdin, stdout, stderr: 160 KiB, zeroed), and with a
// hundred concurrent execs that allocation and the garbage collections it
// brought on were about a sixth of the daemon's CPU
// (docs/failures.md#a-session-reuses-its-relay-buffers). A relay's writer
// copies what it is given (io.Writer may not keep it), so a buffer is free
// again once its relay returns.
var relayBuffers = sync.Pool{New: func() any {
	b := make([]byte, relayBufferSize)
	return &b
}}

const relayBufferSize = 64 << 10

// relayOut copies one output stream to w until EOF, or, once the leader has
// exited, until the stream pauses for DrainQuiet or DrainMax has passed. It
// sets *eof when the stream ended (every writer closed), before it says it
// is done.
func (s *Session) relayOut(f *os.File, w io.Writer, eof *bool) {
	defer s.outWG.Done()
	pooled := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(pooled)
	buf := *pooled
	broken := false
	// Everything the command wrote before its leader exited is delivered,
	// however late this goroutine runs: once the exit is seen, the bytes
	// still in the pipe are counted, and no deadline ends the relay before
	// they are read. A read past its deadline fails without looking at the
	// pipe, so on a loaded machine the tail deadline alone lost output.
	var total, owed int64 = 0, -1
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if n > 0 && !broken {
			if _, werr := w.Write(buf[:n]); werr != nil {
				// The reader is gone (the client vanished): keep reading
				// and discarding, so the command is not blocked on a full
				// pipe while its owner decides what to do with it.
				broken = true
				s.outErr.CompareAndSwap(nil, &werr)
			}
		}
		exited := s.exited.Load()
		if exited && owed < 0 {
			owed = total + unread(f)
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				*eof = errors.Is(err, io.EOF)
				return
			}
			if !exited {
				continue
			}
			if total < owed {
				f.SetReadDeadline(time.Now().Add(s.cfg.DrainQuiet))
				continue
			}
			return
		}
		if exited {
			if total < owed {
				f.SetReadDeadline(time.Now().Add(s.cfg.DrainQuiet))
			} else {
				s.armDrain(f)
			}
		}
	}
}

// unread is how many bytes wait in a pipe or terminal, unread (FIONREAD,
// which Linux also calls TIOCINQ).
func unread(f *os.File) int64 {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	rc.Control(func(fd uintptr) {
		n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
	})
	if err != nil || n < 0 {
		return 0
	}
	return int64(n)
}

// armDrain sets the read deadline of the output tail.
func (s *Session) armDrain(f *os.File) {
	d := time.Now().Add(s.cfg.DrainQuiet)
	if end := s.exitAt.Add(s.cfg.DrainMax); end.Before(d) {
		d = end
	}
	f.SetReadDeadline(d)
}

// relayIn copies the client's input to the command until the client's EOF.
// For pipes the EOF closes the command's stdin
// (docs/failures.md#stdin-eof-reaches-the-command); for a pty it is ignored,
// as sshd ignores it.
func (s *Session) relayIn(r io.Reader) {
	defer close(s.stdinDone)
	var w *os.File
	if s.pty != nil {
		w = s.pty.master
	} else {
		w = s.stdinW
		defer w.Close()
	}
	pooled := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(pooled)
	buf := *pooled
	last := -1 // the last byte typed, -1 for none
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				// The command closed its stdin or the session is over.
				return
			}
			last = int(buf[n-1])
		}
		if err == io.EOF && s.pty != nil && s.cfg.PTY.EndInputWithEOF {
			typeEOF(w, last)
		}
		if err != nil {
			return
		}
	}
}

// waitExit reaps the command, lets the output drain, and publishes the status.
func (s *Session) waitExit() {
	werr := s.cmd.Wait()
	exit := Exit{}
	if code, sig, ok := join.ExitStatus(werr); ok {
		exit.Code, exit.Signal = code, sig
		if ws, isWS := s.cmd.ProcessState.Sys().(syscall.WaitStatus); isWS && ws.Signaled() {
			exit.Core = ws.CoreDump()
		}
		exit.Rusage, _ = s.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	} else {
		exit.Code, exit.Err = 255, fmt.Errorf("wait for session pid %d: %w", s.cmd.Process.Pid, werr)
	}
	s.exitAt = time.Now()
	s.exited.Store(true)
	for _, f := range s.outs {
		s.armDrain(f)
	}
	s.outWG.Wait()

	// The session is over. A pty is hung up, as sshd does when the shell
	// exits; pipes still held by background processes go to Leftovers.
	if s.pty != nil {
		s.pty.master.Close()
	} else {
		for i, f := range s.outs {
			// A pipe read to its end has no writer left, and none can come:
			// only this daemon holds its read end.
			if s.cfg.Leftovers != nil && !s.outEOF[i] {
				s.cfg.Leftovers.adopt(f)
			} else {
				f.Close()
			}
		}
		if s.stdinW != nil {
			s.stdinW.Close()
		}
	}
	s.exit = exit
	close(s.done)
}

// Wait blocks until the command has exited and all of its output has been
// written to Stdout and Stderr, and returns how it ended.
func (s *Session) Wait() Exit {
	<-s.done
	return s.exit
}

// Done is closed when Wait would return.
func (s *Session) Done() <-chan struct{} { return s.done }

// OutputError is the first error a write to Stdout or Stderr returned, or
// nil: the reader went away, and the rest of the output was discarded.
func (s *Session) OutputError() error {
	if p := s.outErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Close waits for the stdin relay, which ends when Stdin returns EOF or an
// error: the caller closes Stdin (the SSH channel) after Wait, then calls
// Close. It does not stop the command.
func (s *Session) Close() {
	<-s.done
	<-s.stdinDone
}

// PID is the command's pid in the substrate, the leader of its process group.
func (s *Session) PID() int { return s.proc.PID }

// TTY is the terminal's name inside the sandbox (/dev/pts/N), or "".
func (s *Session) TTY() string {
	if s.pty == nil {
		return ""
	}
	return s.pty.name
}

// Resize sets the terminal's size (clamped to MaxCols×MaxRows).
func (s *Session) Resize(size Size) error {
	if s.pty == nil {
		return ErrNoPTY
	}
	return setSize(s.pty.master, size)
}

// Break sends a break to the terminal, as sshd does for the SSH "break"
// request.
func (s *Session) Break() error {
	if s.pty == nil {
		return ErrNoPTY
	}
	return sendBreak(s.pty.master)
}

// Signal sends sig to the session's process group.
func (s *Session) Signal(sig syscall.Signal) error {
	if s.exited.Load() {
		return fmt.Errorf("signal %s to session pid %d: the session has ended", SignalName(sig), s.proc.PID)
	}
	if err := s.proc.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to session pid %d: %w", SignalName(sig), s.proc.PID, err)
	}
	return nil
}

// Kill freezes and kills the command's whole process tree
// (docs/failures.md#timeout-kills-the-whole-tree). The output it printed
// before is still relayed, and Wait then reports SIGKILL.
func (s *Session) Kill() {
	// After the leader's exit its pid may be reused; what it left behind on
	// purpose is no longer this session's.
	if s.exited.Load() {
		return
	}
	s.proc.KillTree()
}
