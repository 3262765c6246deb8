package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/internal/entrypoint"
	"github.com/sandboxd/sandboxd/internal/harness"
	"github.com/sandboxd/sandboxd/internal/sessionenv"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/join"
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
	proxyEnv, started, done := d.net.OpenAttributedVisit(d.cfg.Network.Verifier)
	defer done()
	task := append(append([]string{}, proxyEnv...), d.cfg.VerifierEnv...)
	env := sessionenv.Make(d.cfg.ImageEnv, task, user, nil)

	d.setPhase("verify")
	defer d.setPhase("agent")
	d.gradeMu.Lock()
	defer d.gradeMu.Unlock()
	d.releaseGradeSpace()
	defer d.reserveGradeSpace()
	v, err := grade.Run(ctx, grade.Config{
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
		ResolvConf: d.visitorResolv,
		Started:    started,
		Log:        d.log,
	})
	if err == nil {
		v.Collected = d.collect(ctx)
	}
	return v, err
}

func (d *Daemon) setPhase(p string) {
	d.mu.Lock()
	d.phase = p
	d.mu.Unlock()
}

// startEntrypoint runs the image's ENTRYPOINT inside the sandbox as the
// image's user, with the image's and the task's environment, and its output
// logged to <harness>/logs (package entrypoint). done waits for it and for
// its log; the sandbox must be going for it to return.
func (d *Daemon) startEntrypoint(ctx context.Context) (done func(), err error) {
	if len(d.cfg.Entrypoint) == 0 {
		return func() {}, nil
	}
	user := d.imageUser
	env := sessionenv.Make(d.cfg.ImageEnv, d.cfg.Task.EnvironmentEnv().Environ(), user, nil)
	return entrypoint.Start(ctx, entrypoint.Config{
		Target: d.target,
		Spec:   join.Spec{User: user, Env: env, Dir: d.cfg.Workdir, Argv: d.cfg.Entrypoint},
		LogDir: d.harnessPath("logs"),
		Log:    d.log,
		State:  d.entrypointState,
	})
}

func (d *Daemon) entrypointState(s string) {
	d.mu.Lock()
	d.entrypoint = s
	d.mu.Unlock()
}

// visitorMasks are the paths a visitor must not see beside the harness dir:
// what the sandbox hides (the task dir under trial), and on a bare host the
// host's sockets as serve listed them at start, since a visitor's view is
// built from the substrate's.
func (d *Daemon) visitorMasks() []string {
	return append(append([]string{}, d.cfg.Hide...), d.hostSockets...)
}

// reserveGradeSpace sets aside the room a grading needs (harness.ReserveGradeSpace).
func (d *Daemon) reserveGradeSpace() {
	if d.cfg.Tests == "" {
		return
	}
	size, err := harness.ReserveGradeSpace(d.cfg.HarnessDir, d.cfg.Tests)
	if err != nil {
		d.log.Warn("grading may lack room if the agent fills the disk", "err", err)
		return
	}
	d.reserved.Store(size)
}

// releaseGradeSpace frees that room, just before a grading copies the tests.
func (d *Daemon) releaseGradeSpace() {
	d.reserved.Store(0)
	if err := harness.ReleaseGradeSpace(d.cfg.HarnessDir); err != nil {
		d.log.Warn("grading", "err", err)
	}
}
