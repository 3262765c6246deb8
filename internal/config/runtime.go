package config

import (
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/pkg/egress"
)

// RuntimeHosts are the hosts a harness allows at run time, beyond the
// task's own policy, with the semantics of Harbor's `harbor run
// --allow-agent-host` and `--allow-environment-host` (its "Network Policy"
// page, "run-time host allowlists"): an installed agent must reach its
// model's API even under a task that says no-network or allowlist.
//
//   - Agent hosts apply to the agent phase only (agent.run, not the
//     verifier), on top of whatever the agent phase's policy is.
//   - Environment hosts are merged into the [environment] baseline, so they
//     reach every phase that inherits it: the agent and the verifier when
//     their sections set no network_mode of their own, never a phase with
//     an explicit policy.
//   - Either lifts no-network to an allowlist of just those hosts and
//     extends an allowlist; a public phase needs none, and the addition is
//     noted as ignored, as Harbor warns.
type RuntimeHosts struct {
	Agent       []string `json:"agent,omitempty"`       // --allow-agent-host, normalized
	Environment []string `json:"environment,omitempty"` // --allow-environment-host, normalized
	// AddedToAgent and AddedToVerifier are what each phase's policy gained.
	AddedToAgent    []string `json:"added_to_agent,omitempty"`
	AddedToVerifier []string `json:"added_to_verifier,omitempty"`
	// Ignored says which additions a public phase made moot.
	Ignored []string `json:"ignored,omitempty"`
}

// Any reports whether the harness added any host.
func (r RuntimeHosts) Any() bool { return len(r.Agent)+len(r.Environment) > 0 }

// AllowRuntimeHosts applies the run-time hosts to a configuration that
// Configure made: cfg.Network's per-phase policies gain them, and
// cfg.RuntimeHosts says what was added where, for status and the audit log.
// A host that is no name, *.suffix, address or prefix is refused, naming
// the flag.
func AllowRuntimeHosts(cfg Config, agent, environment []string) (Config, error) {
	norm := func(flag string, hosts []string) ([]string, error) {
		if len(hosts) == 0 {
			return nil, nil
		}
		p, err := egress.ParsePolicy(string(egress.Allowlist), hosts, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Settings.as(flag), err)
		}
		return p.AllowedHosts, nil
	}
	var r RuntimeHosts
	var err error
	if r.Agent, err = norm("allow-agent-host", agent); err != nil {
		return cfg, err
	}
	if r.Environment, err = norm("allow-environment-host", environment); err != nil {
		return cfg, err
	}
	if !r.Any() {
		return cfg, nil
	}
	n := &cfg.Network
	if n.Verifier.Mode == "" { // the verifier gets the agent's policy, as it was declared
		n.Verifier = clonePolicy(n.Agent)
	}
	// Without a task, serve's own --network is the baseline of both phases.
	agentInherits, verifierInherits := true, true
	if t := cfg.Task; t != nil {
		agentInherits, verifierInherits = t.Agent.NetworkMode == "", t.Verifier.NetworkMode == ""
	}
	if agentInherits {
		r.AddedToAgent = widen(&n.Agent, r.Environment, "agent", "--allow-environment-host", &r.Ignored)
	}
	if verifierInherits {
		r.AddedToVerifier = widen(&n.Verifier, r.Environment, "verifier", "--allow-environment-host", &r.Ignored)
	}
	if cfg.Task != nil { // the healthcheck runs under the environment's baseline
		var ignored []string
		widen(&cfg.HealthPolicy, r.Environment, "healthcheck", "--allow-environment-host", &ignored)
	}
	for _, h := range widen(&n.Agent, r.Agent, "agent", "--allow-agent-host", &r.Ignored) {
		if !slices.Contains(r.AddedToAgent, h) {
			r.AddedToAgent = append(r.AddedToAgent, h)
		}
	}
	cfg.RuntimeHosts = r
	return cfg, nil
}

// widen adds hosts to a phase's policy and returns those it gained:
// no-network becomes an allowlist of them, an allowlist grows, a public
// policy is left as it is and the addition noted as ignored.
func widen(p *egress.Policy, hosts []string, phase, flag string, ignored *[]string) []string {
	if len(hosts) == 0 {
		return nil
	}
	switch p.Mode {
	case egress.Public:
		*ignored = append(*ignored, fmt.Sprintf("%s %v: ignored for the %s phase, whose policy is public", flag, hosts, phase))
		return nil
	case egress.NoNetwork:
		p.Mode = egress.Allowlist
	}
	var added []string
	for _, h := range hosts {
		if !slices.Contains(p.AllowedHosts, h) {
			p.AllowedHosts = append(p.AllowedHosts, h)
			added = append(added, h)
		}
	}
	return added
}

func clonePolicy(p egress.Policy) egress.Policy {
	p.AllowedHosts = slices.Clone(p.AllowedHosts)
	p.AllowCIDRs = slices.Clone(p.AllowCIDRs)
	return p
}
