package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// ErrNoTask means grading was asked of a serve that has no task.
var ErrNoTask = errors.New("no task is served")

// Grade runs the task's verifier as a visitor and returns its verdict. The
// agent's processes keep running (lesson 43). A non-nil error means sandboxd
// itself failed; the verdict then still says why.
func (d *Daemon) Grade(ctx context.Context, timeout time.Duration) (grade.Verdict, error) {
	if d.cfg.Tests == "" {
		return grade.Verdict{}, fmt.Errorf("%w: start serve with --task DIR (or SANDBOXD_TASK) to grade", ErrNoTask)
	}
	user := d.verifier
	if timeout <= 0 {
		timeout = d.cfg.VerifierTimeout
	}
	proxyEnv, done := d.egress.openVisit(d.cfg.Network.Verifier)
	defer done()
	task := append(append([]string{}, proxyEnv...), d.cfg.VerifierEnv...)
	env := sessionEnv(d.cfg.ImageEnv, task, user, nil)

	d.setPhase("verify")
	defer d.setPhase("agent")
	d.gradeMu.Lock()
	defer d.gradeMu.Unlock()
	d.releaseGradeSpace()
	defer d.reserveGradeSpace()
	return grade.Run(ctx, grade.Config{
		Target:     d.target,
		HarnessDir: d.cfg.HarnessDir,
		Tests:      d.cfg.Tests,
		User:       user,
		Env:        env,
		Workdir:    d.cfg.Workdir,
		Timeout:    timeout,
		Mask:       d.visitorMasks(),
		LogsDir:    "/logs/verifier",
		LogsDirDev: d.logsDev,
		LogsDirIno: d.logsIno,
		Hosts:      d.visitorHosts,
		Log:        d.log,
	})
}

func (d *Daemon) handleGrade(ctx context.Context, conn *control.Conn, req control.Request) {
	var timeout time.Duration
	if req.GradeTimeout != "" {
		t, err := time.ParseDuration(req.GradeTimeout)
		if err != nil || t <= 0 {
			conn.WriteJSON(control.KindError, control.Failure{Code: 125, Message: fmt.Sprintf("bad --timeout %q: write a positive duration such as 10m", req.GradeTimeout)})
			return
		}
		timeout = t
	}
	v, err := d.Grade(ctx, timeout)
	if err != nil {
		code := grade.ExitInternal
		conn.WriteJSON(control.KindError, control.Failure{Code: code, Message: err.Error()})
		return
	}
	d.log.Info("graded", "status", v.Status, "reward", v.Reward, "exit_code", v.ExitCode, "duration_sec", v.DurationSec)
	conn.WriteJSON(control.KindJSON, v)
}

func (d *Daemon) setPhase(p string) {
	d.mu.Lock()
	d.phase = p
	d.mu.Unlock()
}

// startEntrypoint runs the image's ENTRYPOINT inside the sandbox as the
// image's user, as Docker would have run it (Harbor keeps the entrypoint and
// replaces only the command). Its output goes to a log in the harness dir.
// If it exits or crashes, that is logged and reported; serving goes on.
// done waits for the entrypoint; the sandbox must be going for it to return.
func (d *Daemon) startEntrypoint(ctx context.Context) (done func(), err error) {
	if len(d.cfg.Entrypoint) == 0 {
		return func() {}, nil
	}
	user := d.imageUser
	logDir := d.harnessPath("logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("entrypoint: create the log dir: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(logDir, "entrypoint.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("entrypoint: open its log: %w", err)
	}
	env := sessionEnv(d.cfg.ImageEnv, d.cfg.Task.EnvironmentEnv().Environ(), user, nil)
	st, err := d.target.Command(join.Spec{User: user, Env: env, Dir: d.cfg.Workdir, Argv: d.cfg.Entrypoint})
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("entrypoint %q: %w", d.cfg.Entrypoint, err)
	}
	st.Cmd.Stdout, st.Cmd.Stderr = out, out
	proc, err := st.Start()
	out.Close()
	if err != nil {
		d.entrypointState(fmt.Sprintf("failed to start: %v", err))
		d.log.Error("entrypoint failed to start", "argv", d.cfg.Entrypoint, "err", err)
		return func() {}, nil
	}
	d.entrypointState("running")
	d.log.Info("entrypoint started", "argv", d.cfg.Entrypoint, "pid", proc.PID, "uid", user.UID)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		err := st.Cmd.Wait()
		code, sig, _ := join.ExitStatus(err)
		state := fmt.Sprintf("exited %d", code)
		if sig != 0 {
			state = "killed by " + ptyrelay.SignalName(sig)
		}
		d.entrypointState(state)
		if ctx.Err() == nil {
			d.log.Warn("entrypoint ended", "argv", d.cfg.Entrypoint, "state", state)
		}
	}()
	return func() { <-exited }, nil
}

func (d *Daemon) entrypointState(s string) {
	d.mu.Lock()
	d.entrypoint = s
	d.mu.Unlock()
}

// visitorMasks are the paths a visitor must not see beside the harness dir:
// what the sandbox hides (the task dir under trial), and on a bare host the
// host's sockets, since a visitor's view is the substrate's.
func (d *Daemon) visitorMasks() []string {
	masks := append([]string{}, d.cfg.Hide...)
	if d.cfg.HostMode {
		masks = append(masks, bwrap.HostSockets()...)
	}
	return masks
}
