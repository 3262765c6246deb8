package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/task"
)

const serveSynopsis = "[FLAGS] [-- IGNORED...]"

// Agent keys by value: the variable SANDBOXD_AUTHORIZED_KEYS holds key
// lines (never a path: an image's keys come by value, never from a mounted
// home); --authorized-keys's own variable is the file form.
const (
	envKeys     = "SANDBOXD_AUTHORIZED_KEYS"
	envKeysFile = "SANDBOXD_AUTHORIZED_KEYS_FILE"
)

// serveEnv is the variable that gives a serve flag: SANDBOXD_ and the
// flag's name upper-cased, dashes as underscores.
func serveEnv(name string) string {
	if name == "authorized-keys" {
		return envKeysFile
	}
	return "SANDBOXD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// spareThreads is how many OS threads serve makes at start (package spare):
// a wide margin over the eleven an idle serve runs with, for the blocking
// calls (wait4, forks, file reads) of many sessions at once; connections
// park on the poller, not on threads.
const spareThreads = 64

func runServe(ctx context.Context, args []string) int {
	fs := flags("serve", serveSynopsis)
	h := helps[fs]
	h.env = func(name string) string {
		if name == "authorized-keys" {
			return envKeysFile + ", or " + envKeys + " with the key lines themselves"
		}
		return serveEnv(name)
	}
	helps[fs] = h
	harness := fs.String("harness-dir", config.DefaultHarnessDir, "sandboxd's own state `DIR`, hidden from the sandbox")
	workdir := fs.String("workdir", "", "the sandbox's working `DIR` (default: the task's, else the image's, else /)")
	agentUser := fs.String("agent-user", "", "the `USER[:GROUP]` agent sessions run as (default: the task's, else the image's, else root)")
	degraded := fs.Bool("allow-degraded", false, "serve a sandbox weaker than declared (a single-id map; the explicit proxy alone where outbound connections cannot be caught) and report it")
	proxyEnv := fs.Bool("proxy-env", false, "point the agent's programs at the explicit proxy 127.0.0.1:3128 (http_proxy and the rest, an apt configuration); without it they get none, as under Docker, and every connection is caught")
	bwrapPath := fs.String("bwrap", "bwrap", "the bubblewrap binary, a `PATH` or a name on PATH")
	hostMode := fs.Bool("host", false, "no container around sandboxd: also mask the host's sockets")
	reuseRootfs := fs.Bool("reuse-rootfs", false, "UNSAFE, for development only: serve although an agent has already had this root filesystem (the harness dir says so), whose bwrap, libraries and /bin/sh serve then runs as root; status reports it")
	logFormat := &choiceFlag{val: "json", choices: []string{"json", "text"}}
	fs.Var(logFormat, "log-format", "the log's `FORMAT`: json or text")
	taskSel := fs.String("task", "", "the task to serve: a task `DIR`, or the NAME of one under the harness dir (default: the only task an adapted image carries)")
	cidrs := &listFlag{check: checkCIDR}
	fs.Var(cidrs, "egress-allow-cidr", "open an address range the egress guard refuses, deliberately: a `CIDR` such as 10.1.0.0/16 (repeatable)")
	network := &choiceFlag{val: string(egress.Public), choices: []string{string(egress.Public), string(egress.Allowlist), string(egress.NoNetwork)}}
	fs.Var(network, "network", "the agent's network `MODE` without a task: public, allowlist or no-network (with a task: must be the task's)")
	allowHosts := &listFlag{check: checkAllowHost}
	fs.Var(allowHosts, "allow-host", "under allowlist, a `NAME` the agent may reach: an exact name or *.suffix; alone, it means --network allowlist (repeatable)")
	agentHosts, envHosts := runtimeHostFlags(fs)
	peers := &listFlag{check: checkPeer}
	fs.Var(peers, "peer", "offer a substrate service inside the sandbox as `NAME:PORT[=TARGET]`, TARGET a host:port (default 127.0.0.1:PORT) (repeatable)")
	listen := fs.String("listen", "0.0.0.0:2222", "SSH listen `ADDR` in the container's network (\"\" turns SSH off)")
	hostKey := fs.String("host-key", "", "SSH host key `FILE` (default: generated once into the harness dir)")
	authKeys := fs.String("authorized-keys", "", "agent keys `FILE`, OpenSSH authorized_keys format (default: a generated key that sandboxd keys prints)")
	harnessKeys := fs.String("harness-keys", "", "`FILE` of keys that may run control commands (status, grade, keys, records, stop) over SSH, never a shell")
	acceptEnv := &listFlag{}
	fs.Var(acceptEnv, "accept-env", "a `PATTERN` of env request names SSH clients may set, beyond LANG, LC_* and TERM (repeatable)")
	sessionTimeout := fs.Duration("session-timeout", 0, "kill an SSH session's whole tree after this `DURATION` (0: never)")
	maxProcs := fs.Uint64("agent-max-procs", daemon.DefaultAgentMaxProcs, "`N` processes a non-root agent user may have at once (RLIMIT_NPROC; 0: no limit; root is exempt by the kernel)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	settings, notes, err := serveSettings(fs, os.LookupEnv, os.Environ())
	if err != nil {
		return usageError(fs, "%v", err)
	}
	var handler slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if logFormat.val == "text" {
		handler = slog.NewTextHandler(os.Stderr, nil)
	}
	log := slog.New(handler)
	for _, n := range notes {
		log.Warn("settings", "note", n)
	}
	// Stock Harbor starts every image with `sh -c "sleep infinity"`. serve
	// itself ignores it; an image ENTRYPOINT gets it as its arguments, as
	// Docker would have given them (ENTRYPOINT + CMD).
	rest := fs.Args()
	cfg := config.Config{
		HarnessDir:    *harness,
		Workdir:       *workdir,
		AgentUser:     *agentUser,
		AllowDegraded: *degraded,
		Bwrap:         *bwrapPath,
		HostMode:      *hostMode,
		ReuseRootfs:   *reuseRootfs,
		AgentMaxProcs: *maxProcs,
		Log:           log,
		Settings:      settings,
		SSH: config.SSH{
			Listen:         *listen,
			HostKey:        *hostKey,
			AcceptEnv:      acceptEnv.vals,
			SessionTimeout: *sessionTimeout,
		},
	}
	var byValue string
	if settings["authorized-keys"].Source != config.SourceFlag {
		byValue, _ = os.LookupEnv(envKeys)
	}
	keys, err := readKeys(*authKeys, byValue)
	if err != nil {
		return fail("serve: %v", err)
	}
	cfg.SSH.AuthorizedKeys = keys
	if cfg.SSH.HarnessKeys, err = readKeys(*harnessKeys, ""); err != nil {
		return fail("serve: %v", err)
	}
	cfg, err = config.Configure(cfg, *taskSel, cidrs.vals, os.LookupEnv)
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	if cfg, err = config.AllowRuntimeHosts(cfg, agentHosts.vals, envHosts.vals); err != nil {
		return usageError(fs, "%v", err)
	}
	cfg.Network.ProxyEnv = *proxyEnv
	if len(cfg.Entrypoint) > 0 {
		cfg.Entrypoint = append(cfg.Entrypoint, rest...)
	} else if len(rest) > 0 {
		log.Info("ignoring the container's command", "argv", rest)
	}
	cfg.SpareThreads = spareThreads
	err = daemon.Run(ctx, cfg)
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	return 0
}

// serveSettings takes each serve flag the command line did not give from
// its variable (serveEnv), and says where each value came from. A variable
// that is set counts as given even when empty (SANDBOXD_LISTEN= turns SSH
// off, as --listen "" does); a repeatable flag's variable is a
// comma-separated list; a boolean's is 1, true, 0 or false. notes are
// for the log: variables that a flag overrides, and SANDBOXD_ variables
// that are no serve setting.
func serveSettings(fs *flag.FlagSet, lookup func(string) (string, bool), environ []string) (config.Settings, []string, error) {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	settings := config.Settings{}
	known := map[string]bool{envKeys: true}
	var notes []string
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := serveEnv(f.Name)
		known[env] = true
		if err != nil {
			return
		}
		s := config.Setting{Source: config.SourceDefault, As: "--" + f.Name}
		envValue, inEnv := lookup(env)
		byValue := false
		if f.Name == "authorized-keys" && !inEnv {
			// Keys by value; the file form stays unset.
			envValue, inEnv = lookup(envKeys)
			env, byValue = envKeys, inEnv
		}
		switch {
		case onCommandLine[f.Name]:
			s.Source = config.SourceFlag
			if inEnv {
				notes = append(notes, fmt.Sprintf("--%s is given, so %s is not used", f.Name, env))
			}
		case byValue:
			s.Source, s.As = config.SourceEnv, env
			s.Value = fmt.Sprintf("%d keys by value", countKeys(envValue))
		case inEnv:
			s.Source, s.As = config.SourceEnv, env
			if err = setFromEnv(f, env, envValue); err != nil {
				return
			}
		}
		if s.Value == nil {
			s.Value = valueOf(f)
		}
		settings[f.Name] = s
	})
	if err != nil {
		return nil, nil, err
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SANDBOXD_") && !known[name] && name != "SANDBOXD_HARNESS_DIR" {
			notes = append(notes, fmt.Sprintf("%s is set, but serve has no such setting: it is ignored", name))
		}
	}
	sort.Strings(notes)
	return settings, notes, nil
}

// setFromEnv gives flag f the value of its variable env.
func setFromEnv(f *flag.Flag, env, value string) error {
	switch {
	case isBool(f):
		switch strings.ToLower(value) {
		case "1", "true":
			value = "true"
		case "0", "false":
			value = "false"
		default:
			return fmt.Errorf("%s=%q: a boolean setting takes 1, true, 0 or false", env, value)
		}
	case isList(f):
		for _, v := range strings.Split(value, ",") {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("%s=%q: %v", env, value, err)
			}
		}
		return nil
	}
	if err := f.Value.Set(value); err != nil {
		return fmt.Errorf("%s=%q: %v", env, value, err)
	}
	return nil
}

// valueOf is a flag's value as status shows it.
func valueOf(f *flag.Flag) any {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return f.Value.String()
	}
	switch v := g.Get().(type) {
	case time.Duration:
		return v.String()
	default:
		return v
	}
}

func countKeys(lines string) int {
	n := 0
	for _, l := range strings.Split(lines, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			n++
		}
	}
	return n
}

func checkCIDR(v string) error {
	if _, err := netip.ParsePrefix(v); err != nil {
		return fmt.Errorf("%q is not a CIDR range: write one such as 10.1.0.0/16 (or 10.1.2.3/32 for one address)", v)
	}
	return nil
}

func checkAllowHost(v string) error {
	_, err := egress.ParsePolicy(string(egress.Allowlist), []string{v}, nil)
	return err
}

func checkPeer(v string) error {
	_, err := task.ParsePeer(v)
	return err
}

// readKeys reads a keys file and appends keys given by value (never by a
// mounted home: docs/failures.md#key-material-never-inside-the-sandbox).
func readKeys(path, value string) ([]byte, error) {
	var out []byte
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read keys: %w", err)
		}
		out = append(out, b...)
		out = append(out, '\n')
	}
	return append(out, value...), nil
}

// runtimeHostFlags are serve's and trial's --allow-agent-host and
// --allow-environment-host, Harbor's run-time host allowances
// (config.AllowRuntimeHosts).
func runtimeHostFlags(fs *flag.FlagSet) (agent, environment *listFlag) {
	agent, environment = &listFlag{check: checkAllowHost}, &listFlag{check: checkAllowHost}
	fs.Var(agent, "allow-agent-host", "a `NAME` the agent phase may reach beyond the task's policy (its model's API), as harbor run's: lifts no-network to an allowlist, extends one; never the verifier's (repeatable)")
	fs.Var(environment, "allow-environment-host", "a `NAME` merged into the task's [environment] network baseline, as harbor run's: every phase without a network_mode of its own gets it (repeatable)")
	return agent, environment
}
