package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

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
	user := d.agent
	if req.User != "" {
		u, err := d.execUser(req.User)
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

	var stdinR *io.PipeReader
	var stdinW *io.PipeWriter
	if req.Stdin || req.TTY {
		stdinR, stdinW = io.Pipe()
		defer stdinW.Close()
	}
	rec := d.recordExec(req, user)
	cfg := ptyrelay.Config{
		Target:    d.target,
		Spec:      join.Spec{User: user, Env: env, Dir: dir, Argv: req.Argv},
		Stdout:    rec.Stdout(control.Writer{C: conn.Conn, Kind: control.KindStdout}),
		Stderr:    rec.Stderr(control.Writer{C: conn.Conn, Kind: control.KindStderr}),
		Leftovers: d.leftovers,
	}
	if stdinR != nil {
		cfg.Stdin = stdinR
	}
	if req.TTY {
		cfg.PTY = &ptyrelay.PTY{Term: req.Term, Size: ptyrelay.Size{Cols: uint32(req.Cols), Rows: uint32(req.Rows)}, EndInputWithEOF: req.Stdin}
	}
	sess, err := ptyrelay.Start(cfg)
	if err != nil {
		var se *join.SetupError
		if errors.As(err, &se) {
			rec.Finish(se.Code, "", nil, se.Msg)
			fail(se.Code, "%s", se.Msg)
			return
		}
		rec.Finish(125, "", nil, err.Error())
		fail(125, "%v", err)
		return
	}
	id := d.addSession(session{Argv: req.Argv, User: user.UID, PID: sess.PID(), TTY: req.TTY, Started: time.Now(), Via: "control"})
	defer d.removeSession(id)

	// The client's frames: stdin, EOF, window sizes, signals. A vanished
	// client ends the session's tree.
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
					rec.Input(len(payload))
				}
			case control.KindEOF:
				if stdinW != nil {
					stdinW.Close()
				}
			case control.KindResize:
				var r control.Resize
				if json.Unmarshal(payload, &r) == nil {
					sess.Resize(ptyrelay.Size{Cols: uint32(r.Cols), Rows: uint32(r.Rows)})
					rec.Resize(uint32(r.Cols), uint32(r.Rows))
				}
			case control.KindSignal:
				if sig, ok := ptyrelay.ParseSignal(string(payload)); ok {
					sess.Signal(sig)
				}
			}
		}
	}()

	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	timedOut, ended := false, ""
	select {
	case <-sess.Done():
	case <-timer:
		timedOut, ended = true, "timeout"
		sess.Kill()
	case <-clientGone:
		ended = "disconnect"
		sess.Kill()
	case <-ctx.Done():
		sess.Kill()
	}
	e := sess.Wait()
	if e.Signal == syscall.SIGKILL && !timedOut {
		if why := d.goneReason(); why != "" {
			// Say why, rather than let a bare SIGKILL speak for the sandbox.
			conn.Write(control.KindStderr, []byte("sandboxd: "+why+"\n"))
		}
	}
	exit := control.Exit{Code: e.Code, Signal: e.SignalName(), TimedOut: timedOut}
	if timedOut {
		exit.Code = 124
	}
	rec.Finish(exit.Code, e.SignalName(), e.Rusage, ended)
	conn.WriteJSON(control.KindExit, exit)
	d.log.Info("exec ended", "argv", req.Argv, "uid", user.UID, "code", exit.Code, "signal", exit.Signal, "timed_out", timedOut)
	// Let the client read the exit before the connection closes.
	if uc, ok := nc.(*net.UnixConn); ok {
		uc.CloseWrite()
	}
}

// execUser resolves `exec -u USER[:GROUP]` against the image's users as
// they were at start, as the phases' users are: never against the
// sandbox's /etc/passwd and /etc/group as they are now, which the agent can
// rewrite to give a name any uid. A numeric uid[:gid] always resolves (a
// bare uid without an entry gets gid 0, as under Docker); a name made since
// start is refused, with the numeric form to use instead.
func (d *Daemon) execUser(spec string) (idmap.User, error) {
	u, err := d.users.Lookup(spec)
	if errors.Is(err, idmap.ErrUnknownUser) {
		return u, fmt.Errorf("exec -u %s: %w in the image's /etc/passwd and /etc/group as serve read them at start; one made since is not looked up, since the agent can rewrite those files: give the numeric id instead (-u UID or -u UID:GID)", spec, idmap.ErrUnknownUser)
	}
	return u, err
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
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
