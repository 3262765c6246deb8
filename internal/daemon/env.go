package daemon

import (
	"github.com/sandboxd/sandboxd/internal/sessionenv"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// agentEnv is the exact environment of an agent-phase session: sessionenv.Make
// with the proxy variables where the agent may reach any host.
func (d *Daemon) agentEnv(u idmap.User, extra []string) []string {
	task := d.cfg.AgentEnv
	if env := d.net.AgentEnv(); len(env) > 0 {
		task = append(append([]string{}, env...), task...)
	}
	return sessionenv.Make(d.cfg.ImageEnv, task, u, extra)
}
