package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// TasksDir is where an adapted image keeps its tasks, under the harness dir.
func TasksDir(harnessDir string) string { return filepath.Join(harnessDir, "tasks") }

// FindTask resolves what `serve --task` (or SANDBOXD_TASK) names: a task
// directory, or the name of one under the harness dir's tasks. With nothing
// named, an image carrying exactly one task serves it; one carrying none
// serves a bare sandbox ("" and no error).
func FindTask(harnessDir, sel string) (string, error) {
	tasks := TasksDir(harnessDir)
	if sel != "" {
		if st, err := os.Stat(filepath.Join(sel, "task.toml")); err == nil && !st.IsDir() {
			// Its real path: the task dir is hidden by it
			// (docs/failures.md#hidden-paths-are-resolved-once-at-start).
			return bwrap.RealPath(sel)
		}
		if !strings.Contains(sel, "/") {
			dir := filepath.Join(tasks, sel)
			if _, err := os.Stat(filepath.Join(dir, "task.toml")); err == nil {
				return dir, nil
			}
		}
		return "", fmt.Errorf("task %q: no task.toml there and no such task under %s; name a task directory or one of: %s", sel, tasks, strings.Join(taskNames(tasks), ", "))
	}
	names := taskNames(tasks)
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return filepath.Join(tasks, names[0]), nil
	default:
		return "", fmt.Errorf("this image carries %d tasks (%s): choose one with SANDBOXD_TASK=NAME or --task NAME", len(names), strings.Join(names, ", "))
	}
}

func taskNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "task.toml")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// WithTask fills what cfg does not already say from the task: its workdir,
// users, environments, per-phase network policy, peers, entrypoint and
// devices. Flags given to serve win over the task; so do settings that
// cfg.Settings says were given (a flag or a SANDBOXD_ variable), over
// sandboxd.toml's listen, authorized_keys and egress_allow_cidrs. The
// network settings are the exception: given, they must restate the task's
// policy (see restated), since a task is graded under its own.
func WithTask(cfg Config, t *task.Task, extraCIDRs []netip.Prefix) (Config, error) {
	cfg.Task = t
	cfg.Settings = cfg.Settings.clone()
	set := cfg.Settings
	if cfg.Workdir == "" {
		cfg.Workdir = t.Workdir()
		set.from("workdir", cfg.Workdir, taskSource(t.Environment.Workdir, t.Sandboxd.ImageWorkdir))
	}
	if cfg.AgentUser == "" {
		cfg.AgentUser = t.AgentUser()
		set.from("agent-user", cfg.AgentUser, taskSource(t.Agent.User, t.Sandboxd.ImageUser))
	}
	cfg.VerifierUser = t.VerifierUser()
	cfg.ImageEnv = t.Sandboxd.ImageEnv.Environ()
	cfg.AgentEnv = t.AgentEnv().Environ()
	cfg.VerifierEnv = t.VerifierEnv().Environ()
	cfg.VerifierTimeout = t.Verifier.Timeout
	cfg.Entrypoint = t.Sandboxd.Entrypoint
	cfg.ImageUser = t.Sandboxd.ImageUser
	cfg.Tests = filepath.Join(t.Dir, "tests")

	cidrs := append(append([]netip.Prefix{}, t.Sandboxd.EgressAllowCIDRs...), extraCIDRs...)
	if set.Given("egress-allow-cidr") {
		cidrs = extraCIDRs
	} else if len(t.Sandboxd.EgressAllowCIDRs) > 0 {
		set.from("egress-allow-cidr", prefixStrings(cidrs), SourceSandboxd)
	}
	policy := func(n task.Network) (egress.Policy, error) {
		mode := string(n.Mode)
		if mode == "" {
			mode = string(egress.Public)
		}
		p, err := egress.ParsePolicy(mode, n.AllowedHosts, nil)
		if err != nil {
			return egress.Policy{}, fmt.Errorf("task %s: %w", t.Name, err)
		}
		p.AllowCIDRs = cidrs
		return p, nil
	}
	var err error
	if cfg.Network.Agent, err = policy(t.AgentNetwork()); err != nil {
		return cfg, err
	}
	if cfg.Network.Verifier, err = policy(t.VerifierNetwork()); err != nil {
		return cfg, err
	}
	if cfg.HealthPolicy, err = policy(task.Network{Mode: t.Environment.NetworkMode, AllowedHosts: t.Environment.AllowedHosts}); err != nil {
		return cfg, err
	}
	if err := restated(set, t, cfg.Network.Agent); err != nil {
		return cfg, err
	}
	set.from("network", string(cfg.Network.Agent.Mode), SourceTask)
	set.from("allow-host", append([]string{}, cfg.Network.Agent.AllowedHosts...), SourceTask)
	if t.Sandboxd.Listen != "" && !set.Given("listen") {
		cfg.SSH.Listen = t.Sandboxd.Listen
		set.from("listen", cfg.SSH.Listen, SourceSandboxd)
	}
	if t.Sandboxd.AuthorizedKeys != "" && !set.Given("authorized-keys") {
		b, err := os.ReadFile(t.Sandboxd.AuthorizedKeys)
		if err != nil {
			return cfg, fmt.Errorf("task %s: authorized_keys: %w", t.Name, err)
		}
		cfg.SSH.AuthorizedKeys = append(append(cfg.SSH.AuthorizedKeys, '\n'), b...)
		set.from("authorized-keys", t.Sandboxd.AuthorizedKeys, SourceSandboxd)
	}
	for _, p := range t.Sandboxd.Peers {
		cfg.Network.Peers = append(cfg.Network.Peers, Peer{Name: p.Name, Port: p.Port, Target: p.Target})
	}
	if len(cfg.Network.Peers) > 0 {
		set.from("peer", peerStrings(cfg.Network.Peers), SourceSandboxd)
	}
	// The task's own directory holds its tests and solution: when it is not
	// the baked copy inside the harness dir, it is absent from the sandbox too.
	if !Within(t.Dir, cfg.HarnessDir) {
		cfg.Hide = append(cfg.Hide, t.Dir)
	}
	cfg.Devices = append(cfg.Devices, "/dev/kvm", "/dev/fuse", "/dev/net/tun")
	if t.Environment.GPUs > 0 {
		cfg.Devices = append(cfg.Devices, gpuDevices()...)
	}
	return cfg, nil
}

// taskSource is where a value the task gives came from: its task.toml
// (own), else the image's config that adapt wrote into sandboxd.toml
// (image), else serve's default.
func taskSource(own, image string) string {
	switch {
	case own != "":
		return SourceTask
	case image != "":
		return SourceSandboxd
	}
	return SourceDefault
}

func prefixStrings(ps []netip.Prefix) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// Within reports whether path lies in dir (or is dir), by name.
func Within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// gpuDevices are the NVIDIA device nodes present in the substrate.
func gpuDevices() []string {
	matches, _ := filepath.Glob("/dev/nvidia*")
	return matches
}

// Configure completes a serve configuration: it finds and loads the task (if
// any), applies it, and the network flags. Without a task, the network
// settings cfg.Settings says were given (--network, --allow-host, --peer)
// make the agent's policy and the peers; with one, they must restate the
// task's (WithTask). lookup fills the task's ${VAR:-default} values from
// the daemon's environment, and the substrate's own upstream proxy comes from
// its HTTPS_PROXY, HTTP_PROXY and NO_PROXY.
func Configure(cfg Config, taskSel string, allowCIDRs []string, lookup func(string) (string, bool)) (Config, error) {
	if cfg.HarnessDir == "" {
		cfg.HarnessDir = DefaultHarnessDir
	}
	if cfg.Upstream == nil {
		up, err := egress.UpstreamFromEnv(func(name string) string { v, _ := lookup(name); return v })
		if err != nil {
			return cfg, err
		}
		cfg.Upstream = up
	}
	var cidrs []netip.Prefix
	for _, c := range allowCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return cfg, fmt.Errorf("--egress-allow-cidr %q: %v; write a range such as 10.1.0.0/16", c, err)
		}
		cidrs = append(cidrs, p.Masked())
	}
	dir, err := FindTask(cfg.HarnessDir, taskSel)
	if err != nil {
		return cfg, err
	}
	if dir == "" {
		if cfg.Settings != nil {
			cfg.Settings = cfg.Settings.clone()
			agent, peers, err := requestedNetwork(cfg.Settings, allowCIDRs)
			if err != nil {
				return cfg, err
			}
			cfg.Network.Agent, cfg.Network.Peers = agent, peers
			if cfg.Workdir == "" {
				cfg.Settings.from("workdir", "/", SourceDefault)
			}
			if cfg.AgentUser == "" {
				cfg.Settings.from("agent-user", task.DefaultUser, SourceDefault)
			}
		}
		cfg.Network.Agent.AllowCIDRs = cidrs
		cfg.Network.Verifier.AllowCIDRs = cidrs
		return cfg, nil
	}
	t, err := task.Load(dir)
	if err != nil {
		return cfg, err
	}
	cfg.Settings = cfg.Settings.clone()
	cfg.Settings.from("task", dir, SourceDefault) // the only task the image carries
	if err := t.ExpandEnv(lookup); err != nil {
		return cfg, err
	}
	for _, w := range t.Warnings {
		cfg.Log.Warn("task file", "warning", w)
	}
	return WithTask(cfg, t, cidrs)
}
