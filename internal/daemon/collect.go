package daemon

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/internal/sessionenv"
	"github.com/sandboxd/sandboxd/pkg/collect"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/visit"
)

// collect follows a grading as Harbor follows its verifier: the task's
// [[verifier.collect]] hooks as visitors, then its artifacts out of the
// sandbox's view, into <harness>/collected/N (pkg/collect). nil when the
// task declares neither.
func (d *Daemon) collect(ctx context.Context) *collect.Result {
	t := d.cfg.Task
	if t == nil || len(t.Verifier.Collect) == 0 && len(t.Artifacts) == 0 {
		return nil
	}
	var hooks []collect.Hook
	for _, h := range t.Verifier.Collect {
		// A hook's user is resolved against the users as serve read them
		// at start, as every phase's is (execUser).
		u := d.imageUser
		var err error
		if h.User != "" {
			u, err = d.users.Lookup(h.User)
		}
		env := sessionenv.Make(d.cfg.ImageEnv, t.EnvironmentEnv().Environ(), u, nil)
		hooks = append(hooks, collect.Hook{Command: h.Command, Timeout: h.Timeout, Err: err,
			Spec: join.Spec{User: u, Env: env, Dir: d.cfg.Workdir}})
	}
	res, err := collect.Run(ctx, collect.Config{
		Target:    d.target,
		View:      visit.View{HarnessDir: d.cfg.HarnessDir, Mask: d.visitorMasks(), Hosts: d.visitorHosts, ResolvConf: d.visitorResolv, Devices: d.cfg.Devices},
		Base:      d.harnessPath("collected"),
		Hooks:     hooks,
		Artifacts: t.Artifacts,
		Root:      fmt.Sprintf("/proc/%d/root", d.target.PID),
		Workdir:   d.cfg.Workdir,
		// Each hook is the verifier's: its connections are judged by the
		// verifier's policy, as the verifier's are.
		OpenVisit: func() ([]string, func(int), func()) { return d.net.OpenAttributedVisit(d.cfg.Network.Verifier) },
		Log:       d.log,
	})
	if err != nil {
		d.log.Warn("collect", "err", err)
		return &collect.Result{Message: err.Error()}
	}
	return &res
}
