package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// ErrNoTask means grading was asked of a serve that has no task.
var ErrNoTask = errors.New("no task is served")

// Grade runs the task's verifier as a visitor and returns its verdict. The
// agent's processes keep running (docs/failures.md#verifier-sees-agent-servers).
// A non-nil error means sandboxd itself failed; the verdict then still says
// why.
func (d *Daemon) Grade(ctx context.Context, timeout time.Duration) (grade.Verdict, error) {
	if d.cfg.Tests == "" {
		return grade.Verdict{}, fmt.Errorf("%w: start serve with --task DIR (or SANDBOXD_TASK) to grade", ErrNoTask)
	}
	user := d.verifier
	if timeout <= 0 {
		timeout = d.cfg.VerifierTimeout
	}
	proxyEnv, done := d.net.OpenVisit(d.cfg.Network.Verifier)
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
		Devices:    d.cfg.Devices,
		LogsDir:    "/logs/verifier",
		LogsDirDev: d.logsDev,
		LogsDirIno: d.logsIno,
		Hosts:      d.visitorHosts,
		Log:        d.log,
	})
}

func (d *Daemon) setPhase(p string) {
	d.mu.Lock()
	d.phase = p
	d.mu.Unlock()
}

// startEntrypoint runs the image's ENTRYPOINT inside the sandbox as the
// image's user, as Docker would have run it (Harbor keeps the entrypoint and
// replaces only the command). Its stdout and stderr are one pipe, as under
// Docker: the daemon reads it and writes <harness>/logs/entrypoint.log,
// which nothing in the sandbox can open (a file of the harness as the
// entrypoint's stdout was one for the agent too, through /proc/PID/fd/1).
// If it exits or crashes, that is logged and reported; serving goes on.
// done waits for the entrypoint and for its log to be written to the end;
// the sandbox must be going for it to return.
func (d *Daemon) startEntrypoint(ctx context.Context) (done func(), err error) {
	if len(d.cfg.Entrypoint) == 0 {
		return func() {}, nil
	}
	user := d.imageUser
	out, err := openEntrypointLog(d.harnessPath("logs"))
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		out.close()
		return nil, fmt.Errorf("entrypoint: output pipe: %w", err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		out.copy(pr, d.log)
	}()
	wait := func() {
		select {
		case <-logged:
		case <-time.After(entrypointDrain):
			// Something outside the sandbox holds the pipe open: stop
			// rather than hold serve's end.
			pr.SetReadDeadline(time.Now())
			<-logged
		}
		pr.Close()
	}
	env := sessionEnv(d.cfg.ImageEnv, d.cfg.Task.EnvironmentEnv().Environ(), user, nil)
	st, err := d.target.Command(join.Spec{User: user, Env: env, Dir: d.cfg.Workdir, Argv: d.cfg.Entrypoint})
	if err != nil {
		pw.Close()
		wait()
		return nil, fmt.Errorf("entrypoint %q: %w", d.cfg.Entrypoint, err)
	}
	growPipe(pw)
	st.Cmd.Stdout, st.Cmd.Stderr = pw, pw
	proc, err := st.Start()
	// The entrypoint holds its own copy now (or never will): EOF comes
	// when it and whatever it started have all closed theirs.
	pw.Close()
	if err != nil {
		d.entrypointState(fmt.Sprintf("failed to start: %v", err))
		d.log.Error("entrypoint failed to start", "argv", d.cfg.Entrypoint, "err", err)
		return wait, nil
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
	return func() { <-exited; wait() }, nil
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
