package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
	"github.com/sandboxd/sandboxd/pkg/sftpd"
)

// Exit codes sandboxd reports itself, as docker and timeout(1) do.
const (
	exitTimeout = 124
	exitSetup   = 125
)

// session is one "session" channel.
type session struct {
	c  *conn
	ch ssh.Channel

	env      []string // accepted env requests, NAME=value
	envBytes int
	pty      *ptyrelay.PTY

	mu      sync.Mutex // guards the fields below against Sessions()
	started bool
	relay   *ptyrelay.Session
	cast    *cast
	capture *records.Capture // a non-pty exec's output
	rec     Record
	cancel  context.CancelFunc // a harness command's context

	in, out atomic.Int64
	hungUp  atomic.Bool   // the client left before the command ended
	done    chan struct{} // closed when the session has ended and reported
}

func (c *conn) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	ss := &session{c: c, ch: ch, done: make(chan struct{})}
	for req := range reqs {
		ss.handle(req)
	}
	// The client closed the channel or the connection is gone.
	ss.hangup()
	ss.mu.Lock()
	started := ss.started
	ss.mu.Unlock()
	if started {
		<-ss.done
	}
	ch.Close()
}

func (ss *session) handle(req *ssh.Request) {
	ok := false
	switch req.Type {
	case "env":
		ok = ss.setEnv(req.Payload)
	case "pty-req":
		ok = ss.ptyReq(req.Payload)
	case "window-change":
		ok = ss.windowChange(req.Payload)
	case "exec", "shell", "subsystem":
		// start replies itself: the reply must precede the first output of
		// a failure report.
		ss.start(req)
		return
	case "signal":
		ok = ss.signal(req.Payload)
	case "break":
		ss.mu.Lock()
		r := ss.relay
		ss.mu.Unlock()
		ok = r != nil && r.Break() == nil
	default:
		// auth-agent-req@openssh.com, x11-req, and whatever else: refused.
		ss.c.log.Debug("ssh channel request refused", "request", req.Type)
	}
	if req.WantReply {
		req.Reply(ok, nil)
	}
}

// acceptedEnv reports whether an env request may set name: LANG, LC_*,
// TERM, and the operator's AcceptEnv patterns, as sshd's AcceptEnv.
func (ss *session) acceptedEnv(name string) bool {
	if name == "LANG" || name == "TERM" || strings.HasPrefix(name, "LC_") {
		return true
	}
	for _, p := range ss.c.s.cfg.AcceptEnv {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func (ss *session) setEnv(payload []byte) bool {
	var p struct{ Name, Value string }
	if err := ssh.Unmarshal(payload, &p); err != nil || ss.c.id.harness || ss.isStarted() {
		return false
	}
	if p.Name == "" || strings.ContainsAny(p.Name, "=\x00") || strings.ContainsRune(p.Value, 0) || !ss.acceptedEnv(p.Name) {
		return false
	}
	size := len(p.Name) + len(p.Value) + 1
	if len(ss.env) >= maxEnvVars || ss.envBytes+size > maxEnvBytes {
		return false
	}
	ss.env = setVar(ss.env, p.Name, p.Value)
	ss.envBytes += size
	return true
}

func setVar(env []string, name, value string) []string {
	prefix := name + "="
	for i, kv := range env {
		if strings.HasPrefix(kv, prefix) {
			env[i] = prefix + value
			return env
		}
	}
	return append(env, prefix+value)
}

func (ss *session) ptyReq(payload []byte) bool {
	var p struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}
	if err := ssh.Unmarshal(payload, &p); err != nil || ss.c.id.harness || ss.isStarted() {
		return false
	}
	if ss.c.id.key.NoPTY {
		ss.c.log.Info("pty refused: the key has no-pty or restrict")
		return false
	}
	if len(p.Term) > 256 || strings.ContainsRune(p.Term, 0) {
		return false
	}
	ss.pty = &ptyrelay.PTY{
		Term:  p.Term,
		Size:  ptyrelay.Size{Cols: p.Cols, Rows: p.Rows, XPixels: p.Width, YPixels: p.Height}.Clamp(),
		Modes: []byte(p.Modes),
	}
	return true
}

func (ss *session) windowChange(payload []byte) bool {
	var p struct{ Cols, Rows, Width, Height uint32 }
	if err := ssh.Unmarshal(payload, &p); err != nil || ss.pty == nil {
		return false
	}
	size := ptyrelay.Size{Cols: p.Cols, Rows: p.Rows, XPixels: p.Width, YPixels: p.Height}.Clamp()
	ss.mu.Lock()
	r, cast := ss.relay, ss.cast
	if r == nil {
		ss.pty.Size = size
	}
	ss.mu.Unlock()
	if r == nil {
		return true
	}
	if cast != nil {
		cast.resize(size.Cols, size.Rows)
	}
	return r.Resize(size) == nil
}

func (ss *session) signal(payload []byte) bool {
	var p struct{ Signal string }
	if err := ssh.Unmarshal(payload, &p); err != nil {
		return false
	}
	sig, ok := ptyrelay.ParseSignal(p.Signal)
	ss.mu.Lock()
	r := ss.relay
	ss.mu.Unlock()
	if !ok || r == nil {
		return false
	}
	return r.Signal(sig) == nil
}

func (ss *session) isStarted() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.started
}

// start runs exec, shell or subsystem. Only one may run per channel. Once
// the request is accepted, any failure to set the command up is reported on
// the channel — the reason on stderr and an exit status — rather than by a
// bare refusal (docs/failures.md#setup-failures-carry-the-reason).
func (ss *session) start(req *ssh.Request) {
	var command, subsystem string
	switch req.Type {
	case "exec":
		var p struct{ Command string }
		if ssh.Unmarshal(req.Payload, &p) != nil {
			req.Reply(false, nil)
			return
		}
		command = p.Command
	case "subsystem":
		var p struct{ Name string }
		if ssh.Unmarshal(req.Payload, &p) != nil {
			req.Reply(false, nil)
			return
		}
		subsystem = p.Name
	}
	ss.mu.Lock()
	if ss.started {
		ss.mu.Unlock()
		req.Reply(false, nil)
		return
	}
	ss.started = true
	now := time.Now()
	ss.rec = Record{
		ID: newID(now), Kind: req.Type, Subsystem: subsystem,
		Login: ss.c.sconn.User(), Key: ss.c.id.key.Fingerprint(),
		Remote: ss.c.sconn.RemoteAddr().String(), Start: now, PTY: ss.pty != nil,
	}
	ss.rec.Command, ss.rec.Truncated = command, len(command) > maxRecordedCommand
	if ss.rec.Truncated {
		ss.rec.Command = command[:maxRecordedCommand]
	}
	if ss.pty != nil {
		ss.rec.Term = ss.pty.Term
	}
	ss.mu.Unlock()

	if ss.c.id.harness {
		ss.startHarness(req, command)
		return
	}
	if req.Type == "subsystem" && subsystem != "sftp" {
		ss.c.log.Info("ssh subsystem refused", "subsystem", subsystem)
		ss.writeErr(fmt.Sprintf("sandboxd: subsystem %q is not available (only sftp is)", subsystem))
		req.Reply(false, nil)
		ss.finish(exitInfo{Code: exitSetup}, "unknown subsystem")
		return
	}
	req.Reply(true, nil)

	agent, err := ss.c.s.cfg.Agent()
	if err != nil {
		ss.fail(exitSetup, fmt.Sprintf("cannot start a session: %v", err))
		return
	}
	spec := join.Spec{User: agent.User, Dir: agent.Dir, Env: append([]string(nil), agent.Env...)}
	for _, kv := range ss.env {
		name, value, _ := strings.Cut(kv, "=")
		spec.Env = setVar(spec.Env, name, value)
	}
	ss.mu.Lock()
	ss.rec.User = agent.User.Name
	if ss.rec.User == "" {
		ss.rec.User = fmt.Sprint(agent.User.UID)
	}
	ss.rec.UID, ss.rec.GID = agent.User.UID, agent.User.GID
	ss.mu.Unlock()

	shell := agent.User.Shell
	if shell == "" || !ss.c.s.executableInSandbox(shell) {
		shell = "/bin/sh"
	}
	switch req.Type {
	case "exec":
		spec.Argv = []string{shell, "-c", command}
		if args, ok := sftpd.SCP(command); ok && ss.pty == nil {
			// The legacy scp server is sandboxd's own, as sftp is.
			spec.Role, spec.Argv = sftpd.Role, args
		}
	case "shell":
		// A login shell: argv[0] starts with '-', as login(1) and sshd do.
		spec.Path, spec.Argv = shell, []string{"-" + filepath.Base(shell)}
	case "subsystem":
		spec.Role, spec.Argv = sftpd.Role, sftpd.SFTP
		// A file server never gets a terminal.
		ss.mu.Lock()
		ss.pty, ss.rec.PTY, ss.rec.Term = nil, false, ""
		ss.mu.Unlock()
	}

	cfg := ptyrelay.Config{
		Target:    ss.c.s.cfg.Target,
		Spec:      spec,
		PTY:       ss.pty,
		Stdin:     records.CountingReader{R: ss.ch, N: &ss.in},
		Leftovers: &ss.c.s.leftovers,
	}
	if ss.pty != nil {
		c, name, err := ss.c.s.rec.newCast(ss.rec.ID, ss.pty.Size.Cols, ss.pty.Size.Rows, ss.pty.Term, command, now)
		if err != nil {
			ss.c.log.Warn("session not recorded", "err", err)
		}
		if c != nil {
			ss.mu.Lock()
			ss.cast, ss.rec.Cast = c, name
			ss.mu.Unlock()
		}
		cfg.Stdout = countingWriter{w: ss.ch, n: &ss.out, cast: ss.cast}
	} else {
		if spec.Role == "" && ss.rec.Kind == "exec" {
			// A command's output, never a file server's stream.
			ss.capture = ss.c.s.rec.capture(ss.rec.ID)
		}
		cfg.Stdout = ss.capture.Stdout(countingWriter{w: ss.ch, n: &ss.out})
		cfg.Stderr = ss.capture.Stderr(countingWriter{w: ss.ch.Stderr(), n: &ss.out})
	}

	if !ss.c.s.addSession(ss) {
		ss.fail(exitSetup, "sandboxd is shutting down")
		return
	}
	// The size may have changed between pty-req and now; take it under the
	// lock that window-change uses, so no resize is lost.
	ss.mu.Lock()
	if ss.pty != nil {
		p := *ss.pty
		cfg.PTY = &p
	}
	relay, err := ptyrelay.Start(cfg)
	if err == nil {
		ss.relay = relay
	}
	ss.mu.Unlock()
	if err != nil {
		ss.c.s.removeSession(ss)
		var se *join.SetupError
		if errors.As(err, &se) {
			ss.fail(se.Code, se.Msg)
		} else {
			ss.fail(exitSetup, err.Error())
		}
		return
	}
	ss.c.log.Info("ssh session started", "id", ss.rec.ID, "kind", req.Type, "pty", ss.pty != nil, "pid", relay.PID())
	ss.c.wg.Add(1)
	go func() {
		defer ss.c.wg.Done()
		ss.wait(relay)
	}()
}

// wait follows a started command to its end and reports it: all output,
// then exit-status or exit-signal, then EOF, then close
// (docs/failures.md#exit-status-before-eof-and-close).
func (ss *session) wait(relay *ptyrelay.Session) {
	var timeout <-chan time.Time
	if d := ss.c.s.cfg.SessionTimeout; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	ended := ""
	select {
	case <-relay.Done():
	case <-timeout:
		ended = "timeout"
		ss.c.log.Warn("ssh session timed out; killing its process tree", "id", ss.rec.ID, "timeout", ss.c.s.cfg.SessionTimeout)
		relay.Kill()
	}
	exit := relay.Wait()
	if exit.Err != nil {
		ss.c.log.Error("ssh session status lost", "id", ss.rec.ID, "err", exit.Err)
	}
	ss.mu.Lock()
	ss.rec.Via, ss.rec.Usage = "ssh", records.UsageOf(exit.Rusage)
	ss.rec.Output = ss.capture.Close()
	ss.mu.Unlock()
	e := exitInfo{Code: exit.Code, Signal: exit.SignalName(), Core: exit.Core}
	if ended == "timeout" {
		msg := fmt.Sprintf("sandboxd: session timeout (%s) elapsed; its processes were killed", ss.c.s.cfg.SessionTimeout)
		ss.writeErr(msg)
		e = exitInfo{Code: exitTimeout}
	} else if ss.hungUp.Load() || relay.OutputError() != nil {
		ended = "disconnect"
	}
	ss.finish(e, ended)
	if ss.cast != nil {
		if err := ss.cast.close(); err != nil {
			ss.c.log.Warn("session recording incomplete", "id", ss.rec.ID, "err", err)
		}
	}
	// The stdin relay ends once the client has answered our close.
	relay.Close()
}

// exitInfo is what the client is told about the end of a session.
type exitInfo struct {
	Code   int
	Signal string // without "SIG"; set instead of Code when killed
	Core   bool
}

// finish sends the status, EOF and close, records the session and
// unregisters it.
func (ss *session) finish(e exitInfo, ended string) {
	why := ""
	if ss.c.s.cfg.Gone != nil && e.Signal == "KILL" {
		why = ss.c.s.cfg.Gone()
	}
	if why != "" {
		// Tell the client why, rather than let a bare signal speak.
		ss.writeErr("sandboxd: " + why)
	}
	ss.c.out.together(func() {
		if e.Signal != "" {
			ss.ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
				Signal     string
				CoreDumped bool
				Error      string
				Lang       string
			}{e.Signal, e.Core, why, ""}))
		} else {
			ss.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(e.Code)}))
		}
		ss.ch.CloseWrite()
		ss.ch.Close()
	})

	ss.mu.Lock()
	ss.rec.End = time.Now()
	ss.rec.Exit, ss.rec.Signal, ss.rec.Ended = e.Code, e.Signal, ended
	ss.rec.BytesIn, ss.rec.BytesOut = ss.in.Load(), ss.out.Load()
	rec := ss.rec
	ss.mu.Unlock()
	if err := ss.c.s.rec.write(&rec); err != nil {
		ss.c.log.Warn("session record lost", "id", rec.ID, "err", err)
	}
	ss.c.log.Info("ssh session ended", "id", rec.ID, "exit", e.Code, "signal", e.Signal, "ended", ended,
		"bytes_in", rec.BytesIn, "bytes_out", rec.BytesOut, "duration", rec.End.Sub(rec.Start).Round(time.Millisecond))
	ss.c.s.removeSession(ss)
	close(ss.done)
}

// fail reports a session that could not start: the reason on stderr, then
// the exit status (docs/failures.md#setup-failures-carry-the-reason).
func (ss *session) fail(code int, msg string) {
	ss.c.log.Warn("ssh session could not start", "id", ss.rec.ID, "err", msg)
	ss.writeErr("sandboxd: " + msg)
	ss.finish(exitInfo{Code: code}, msg)
}

// writeErr writes a line of sandboxd's own to the client: on stderr, or on
// the terminal (with CRLF) for a pty session, where stderr is not separate.
func (ss *session) writeErr(msg string) {
	if ss.pty != nil {
		io.WriteString(ss.ch, "\r\n"+msg+"\r\n")
		return
	}
	io.WriteString(ss.ch.Stderr(), msg+"\n")
}

// hangup ends a session whose client went away before it did: SIGHUP to
// its process group, as a hung-up terminal would, then SIGKILL.
func (ss *session) hangup() {
	ss.mu.Lock()
	r, cancel := ss.relay, ss.cancel
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if r == nil {
		return
	}
	select {
	case <-r.Done():
		return
	default:
	}
	ss.hungUp.Store(true)
	ss.c.log.Info("ssh client left before its command ended; hanging up", "id", ss.rec.ID, "pid", r.PID())
	r.Signal(syscall.SIGHUP)
	t := time.NewTimer(ss.c.s.cfg.HangupGrace)
	defer t.Stop()
	select {
	case <-r.Done():
	case <-t.C:
		r.Signal(syscall.SIGKILL)
	}
}

func (ss *session) info() (SessionInfo, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.started {
		return SessionInfo{}, false
	}
	return SessionInfo{ID: ss.rec.ID, Kind: ss.rec.Kind, Command: truncate(ss.rec.Command, 200), PTY: ss.rec.PTY, Remote: ss.rec.Remote, Start: ss.rec.Start}, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// startHarness runs a control command for a harness key, in the substrate.
func (ss *session) startHarness(req *ssh.Request, command string) {
	if req.Type != "exec" {
		fmt.Fprintf(ss.ch.Stderr(), "sandboxd: a harness key may only run sandboxd's control commands (status, grade, stop, keys); %s is refused\n", req.Type)
		req.Reply(false, nil)
		ss.finish(exitInfo{Code: exitSetup}, "harness key: "+req.Type+" refused")
		return
	}
	req.Reply(true, nil)
	ss.mu.Lock()
	ss.rec.User = "harness"
	ctx, cancel := context.WithCancel(ss.c.ctx)
	ss.cancel = cancel
	ss.mu.Unlock()
	if !ss.c.s.addSession(ss) {
		cancel()
		ss.fail(exitSetup, "sandboxd is shutting down")
		return
	}
	ss.c.wg.Add(1)
	go func() {
		defer ss.c.wg.Done()
		defer cancel()
		stdout := countingWriter{w: ss.ch, n: &ss.out}
		stderr := countingWriter{w: ss.ch.Stderr(), n: &ss.out}
		code := ss.c.s.cfg.Harness(ctx, command, stdout, stderr)
		ended := ""
		if ctx.Err() != nil {
			ended = "disconnect"
		}
		ss.finish(exitInfo{Code: code}, ended)
	}()
}
