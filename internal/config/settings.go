package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Where a serve setting came from, as `sandboxd status` names it. serve's
// flag wins over its SANDBOXD_ variable, which wins over what the served
// task says (sandboxd.toml, or task.toml for what Harbor's schema owns: the
// network policy, the workdir, the agent user), which wins over the default.
const (
	SourceFlag     = "flag"
	SourceEnv      = "env"
	SourceSandboxd = "sandboxd.toml"
	SourceTask     = "task.toml"
	SourceDefault  = "default"
)

// Setting is one serve setting: its effective value and where it came from.
type Setting struct {
	Value  any    `json:"value"`
	Source string `json:"source"`
	// As is how it was given, for messages: "--network" or "SANDBOXD_NETWORK".
	As string `json:"-"`
}

// Settings are serve's settings by flag name. A nil Settings says nothing
// was given: the Config is taken as it is (trial, tests).
type Settings map[string]Setting

// Given reports whether serve's command line or environment gave the
// setting; one that is given, even empty, is never taken from the task.
func (s Settings) Given(name string) bool {
	src := s[name].Source
	return src == SourceFlag || src == SourceEnv
}

// list is a given setting's value as a list.
func (s Settings) list(name string) []string {
	switch v := s[name].Value.(type) {
	case []string:
		return v
	case string:
		return []string{v}
	}
	return nil
}

func (s Settings) str(name string) string {
	v, _ := s[name].Value.(string)
	return v
}

// as is how the setting was given, for a message: `--peer` or `SANDBOXD_PEER`.
func (s Settings) as(name string) string {
	if a := s[name].As; a != "" {
		return a
	}
	return "--" + name
}

// from records a setting that serve's flags and variables did not give.
func (s Settings) from(name string, v any, source string) {
	if s == nil || s.Given(name) {
		return
	}
	s[name] = Setting{Value: v, Source: source}
}

func (s Settings) clone() Settings {
	if s == nil {
		return nil
	}
	out := make(Settings, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

// requestedNetwork is the agent's policy and the peers as serve's own
// settings give them, for a serve without a task: --network (default
// public; --allow-host alone means an allowlist, as allowed_hosts does in
// task.toml), --allow-host and --peer.
func requestedNetwork(s Settings, cidrs []string) (egress.Policy, []Peer, error) {
	mode := string(egress.Public)
	hosts := s.list("allow-host")
	switch {
	case s.Given("network"):
		mode = s.str("network")
	case s.Given("allow-host") && len(hosts) > 0:
		mode = string(egress.Allowlist)
		s["network"] = Setting{Value: mode, Source: s["allow-host"].Source, As: s.as("allow-host")}
	}
	if mode == string(egress.NoNetwork) && len(cidrs) > 0 {
		return egress.Policy{}, nil, fmt.Errorf("%s says no-network, where nothing is reached, and %s opens %s: drop one of them", s.as("network"), s.as("egress-allow-cidr"), strings.Join(cidrs, ", "))
	}
	p, err := egress.ParsePolicy(mode, hosts, nil)
	if err != nil {
		return egress.Policy{}, nil, fmt.Errorf("%s %s: %w", s.as("network"), mode, err)
	}
	peers, err := requestedPeers(s)
	if err != nil {
		return egress.Policy{}, nil, err
	}
	// Status shows them as they apply: normalized, with default targets.
	normalized(s, "allow-host", append([]string{}, p.AllowedHosts...))
	normalized(s, "peer", peerStrings(peers))
	return p, peers, nil
}

func normalized(s Settings, name string, v []string) {
	if set, ok := s[name]; ok {
		set.Value = v
		s[name] = set
	}
}

func requestedPeers(s Settings) ([]Peer, error) {
	var peers []Peer
	for _, v := range s.list("peer") {
		p, err := task.ParsePeer(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.as("peer"), err)
		}
		peers = append(peers, Peer{Name: p.Name, Port: p.Port, Target: p.Target})
	}
	return peers, nil
}

// restated checks that serve's own network settings, where given, say
// what the served task says. A task's network declaration — the agent's
// network mode and allowed hosts (task.toml) and its peers (sandboxd.toml)
// — is part of what the task measures, so serve may restate it (an
// image's run-time settings asserting what they expect) but never change
// it, wider or narrower: a setting that differs is refused, naming both.
func restated(s Settings, t *task.Task, agent egress.Policy) error {
	refuse := func(what, taskSays, file, name, flagSays string) error {
		return fmt.Errorf("task %q says %s %s (%s), and %s says %s: serve may restate a served task's network declaration but never changes it; drop %s, or change the task",
			t.Name, what, taskSays, file, s.as(name), flagSays, s.as(name))
	}
	if s.Given("network") && s.str("network") != string(agent.Mode) {
		return refuse("the agent's network is", string(agent.Mode), task.PathTaskTOML, "network", s.str("network"))
	}
	if s.Given("allow-host") {
		given := s.list("allow-host")
		var hosts []string
		if len(given) > 0 {
			p, err := egress.ParsePolicy(string(egress.Allowlist), given, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", s.as("allow-host"), err)
			}
			hosts = p.AllowedHosts
		}
		if !s.Given("network") && len(hosts) > 0 && agent.Mode != egress.Allowlist {
			return refuse("the agent's network is", string(agent.Mode), task.PathTaskTOML, "allow-host", "allowlist "+listOf(hosts))
		}
		if !sameSet(hosts, agent.AllowedHosts) {
			return refuse("the agent's allowed hosts are", listOf(agent.AllowedHosts), task.PathTaskTOML, "allow-host", listOf(hosts))
		}
	}
	if s.Given("peer") {
		given, err := requestedPeers(s)
		if err != nil {
			return err
		}
		var mine, theirs []string
		for _, p := range given {
			mine = append(mine, peerString(p))
		}
		for _, p := range t.Sandboxd.Peers {
			theirs = append(theirs, peerString(Peer{Name: p.Name, Port: p.Port, Target: p.Target}))
		}
		if !sameSet(mine, theirs) {
			return refuse("its peers are", listOf(theirs), "sandboxd.toml", "peer", listOf(mine))
		}
	}
	return nil
}

// peerString is a peer as --peer writes it.
func peerString(p Peer) string {
	target := p.Target
	if target == "" {
		target = fmt.Sprintf("127.0.0.1:%d", p.Port)
	}
	return fmt.Sprintf("%s:%d=%s", strings.ToLower(p.Name), p.Port, target)
}

func peerStrings(peers []Peer) []string {
	out := []string{}
	for _, p := range peers {
		out = append(out, peerString(p))
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func listOf(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return "[" + strings.Join(v, " ") + "]"
}
