package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// drainAfterExit bounds how long output is still relayed after the command's
// leader has exited. Completion is the leader's exit, not pipe EOF (lesson 41):
// a background process that kept the pipe would otherwise hold the session
// forever. What it writes later is read and dropped, so it never gets SIGPIPE.
const drainAfterExit = 200 * time.Millisecond

// exec runs one `sandboxd exec` request.
func (d *Daemon) exec(ctx context.Context, conn *control.Conn, nc net.Conn, req control.Request) {
	fail := func(code int, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		d.log.Warn("exec refused", "argv", req.Argv, "reason", msg)
		conn.WriteJSON(control.KindError, control.Failure{Code: code, Message: msg})
	}
	if len(req.Argv) == 0 {
		fail(125, "no command given: write `sandboxd exec -- COMMAND [ARG...]`")
		return
	}
	if req.TTY {
		fail(125, "a terminal (-t) is not available on the control socket of this build; use ssh -t")
		return
	}
	user := d.agent
	if req.User != "" {
		u, err := idmap.Lookup("/", req.User)
		if err != nil {
			fail(125, "%v", err)
			return
		}
		user = u
	}
	var timeout time.Duration
	if req.Timeout != "" {
		t, err := time.ParseDuration(req.Timeout)
		if err != nil || t <= 0 {
			fail(125, "bad --timeout %q: write a positive duration such as 30s or 5m", req.Timeout)
			return
		}
		timeout = t
	}
	dir := req.Dir
	if dir == "" {
		dir = d.cfg.Workdir
	}
	for _, kv := range req.Env {
		if k, _, ok := cutEnv(kv); !ok || k == "" {
			fail(125, "bad -e %q: write NAME=VALUE", kv)
			return
		}
	}
	env := d.agentEnv(user, req.Env)

	st, err := d.target.Command(join.Spec{User: user, Env: env, Dir: dir, Argv: req.Argv})
	if err != nil {
		fail(125, "%v", err)
		return
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		fail(125, "pipe: %v", err)
		return
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		fail(125, "pipe: %v", err)
		return
	}
	var stdinW *os.File
	if req.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			fail(125, "pipe: %v", err)
			return
		}
		st.Cmd.Stdin, stdinW = r, w
		defer r.Close()
	}
	st.Cmd.Stdout, st.Cmd.Stderr = stdoutW, stderrW

	proc, err := st.Start()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		st.Cmd.Wait()
		stdoutR.Close()
		stderrR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		var se *join.SetupError
		if errors.As(err, &se) {
			fail(se.Code, "%s", se.Msg)
			return
		}
		fail(125, "%v", err)
		return
	}
	id := d.addSession(session{Argv: req.Argv, User: user.UID, PID: proc.PID, Started: time.Now(), Via: "control"})
	defer d.removeSession(id)

	out := &gatedWriter{w: control.Writer{C: conn, Kind: control.KindStdout}}
	errw := &gatedWriter{w: control.Writer{C: conn, Kind: control.KindStderr}}
	var relays sync.WaitGroup
	relays.Add(2)
	go func() { defer relays.Done(); io.Copy(out, stdoutR); stdoutR.Close() }()
	go func() { defer relays.Done(); io.Copy(errw, stderrR); stderrR.Close() }()

	// The client's frames: stdin, EOF, signals. A vanished client ends the
	// session's tree.
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		for {
			kind, payload, err := conn.Read()
			if err != nil {
				return
			}
			switch kind {
			case control.KindStdin:
				if stdinW != nil {
					stdinW.Write(payload)
				}
			case control.KindEOF:
				if stdinW != nil {
					stdinW.Close()
				}
			case control.KindSignal:
				if sig, ok := signalByName(string(payload)); ok {
					proc.Signal(sig)
				}
			}
		}
	}()

	waited := make(chan error, 1)
	go func() { waited <- st.Cmd.Wait() }()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	timedOut := false
	var werr error
	select {
	case werr = <-waited:
	case <-timer:
		timedOut = true
		proc.KillTree()
		werr = <-waited
	case <-clientGone:
		proc.KillTree()
		werr = <-waited
	case <-ctx.Done():
		proc.KillTree()
		werr = <-waited
	}
	if stdinW != nil {
		stdinW.Close()
	}
	relayed := make(chan struct{})
	go func() { relays.Wait(); close(relayed) }()
	select {
	case <-relayed:
	case <-time.After(drainAfterExit):
		out.discard()
		errw.discard()
	}
	code, sig, ok := join.ExitStatus(werr)
	exit := control.Exit{Code: code, TimedOut: timedOut}
	if !ok {
		exit.Code = 125
	}
	if sig != 0 {
		exit.Signal = signalName(sig)
	}
	if timedOut {
		exit.Code = 124
	}
	conn.WriteJSON(control.KindExit, exit)
	d.log.Info("exec ended", "argv", req.Argv, "uid", user.UID, "code", exit.Code, "signal", exit.Signal, "timed_out", timedOut)
	// Let the client read the exit before the connection closes.
	if uc, ok := nc.(*net.UnixConn); ok {
		uc.CloseWrite()
	}
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

// gatedWriter forwards to w until discard is called, then drops everything:
// late output of background processes must not follow the exit frame.
type gatedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	gone bool
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone {
		return len(p), nil
	}
	if _, err := g.w.Write(p); err != nil {
		g.gone = true // the client left: keep draining so writers never block
	}
	return len(p), nil
}

func (g *gatedWriter) discard() {
	g.mu.Lock()
	g.gone = true
	g.mu.Unlock()
}

func (d *Daemon) addSession(s session) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextID++
	s.ID = d.nextID
	d.sessions[s.ID] = &s
	return s.ID
}

func (d *Daemon) removeSession(id int) {
	d.mu.Lock()
	delete(d.sessions, id)
	d.mu.Unlock()
}

var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "ALRM": syscall.SIGALRM,
	"ABRT": syscall.SIGABRT, "PIPE": syscall.SIGPIPE, "STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT,
	"TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH, "SEGV": syscall.SIGSEGV, "ILL": syscall.SIGILL,
	"FPE": syscall.SIGFPE, "BUS": syscall.SIGBUS, "TRAP": syscall.SIGTRAP,
}

func signalByName(name string) (syscall.Signal, bool) {
	s, ok := signals[name]
	return s, ok
}

func signalName(sig syscall.Signal) string {
	for n, s := range signals {
		if s == sig {
			return n
		}
	}
	return fmt.Sprint(int(sig))
}
