package daemon

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/internal/sessionenv"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/visit"
)

// Health states, as Docker names them; Status.Health is one of them, or ""
// when the task has no healthcheck.
const (
	HealthStarting  = "starting"
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
)

// watchHealth runs the task's healthcheck as a visitor, with Docker's
// semantics: checks every start_interval during start_period, where failures
// do not count, then every interval; healthy at the first success, unhealthy
// after `retries` failures in a row. It runs until ctx ends; an unhealthy
// task is reported, and served on.
func (d *Daemon) watchHealth(ctx context.Context) {
	hc := d.cfg.Task.Environment.Healthcheck
	user := d.imageUser
	started := time.Now()
	failures := 0
	for {
		inStart := time.Since(started) < hc.StartPeriod
		// Each check is a visit under the environment's policy: its
		// connections and queries are told apart from the agent's.
		proxyEnv, started, done := d.net.OpenAttributedVisit(d.cfg.HealthPolicy)
		env := sessionenv.Make(d.cfg.ImageEnv, append(proxyEnv, d.cfg.Task.EnvironmentEnv().Environ()...), user, nil)
		res, err := visit.Check(ctx, d.target,
			visit.View{HarnessDir: d.cfg.HarnessDir, Mask: d.visitorMasks(), Hosts: d.visitorHosts, ResolvConf: d.visitorResolv, Devices: d.cfg.Devices, Started: started},
			join.Spec{User: user, Env: env, Dir: d.cfg.Workdir, Argv: []string{"/bin/sh", "-c", hc.Command}},
			hc.Timeout)
		done()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			d.log.Warn("healthcheck could not run", "err", err)
		case res.Code == 0:
			failures = 0
			if d.health() != HealthHealthy {
				d.log.Info("healthy", "command", hc.Command)
			}
			d.setHealth(HealthHealthy, res.Output)
		case !inStart:
			failures++
			if failures >= int(hc.Retries) && d.health() != HealthUnhealthy {
				d.log.Warn("unhealthy", "command", hc.Command, "failures", failures, "exit", res.Code, "timed_out", res.TimedOut, "output", res.Output)
				d.setHealth(HealthUnhealthy, res.Output)
			}
		}
		wait := hc.Interval
		if inStart && d.health() == HealthStarting {
			wait = hc.StartInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (d *Daemon) setHealth(state, output string) {
	d.mu.Lock()
	d.healthState, d.healthOutput = state, output
	d.healthPassed = d.healthPassed || state == HealthHealthy
	d.mu.Unlock()
}

// HealthPassed reports whether the task's healthcheck has passed at least
// once (or the task has none), with its state now: Harbor starts the agent
// phase at the first pass, and readiness (`status --ready`) waits for the
// same. A check that fails later is reported in state, not here.
func (d *Daemon) HealthPassed() (passed bool, state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg.Task == nil || d.cfg.Task.Environment.Healthcheck == nil {
		return true, ""
	}
	return d.healthPassed, d.healthState
}

func (d *Daemon) health() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.healthState
}
