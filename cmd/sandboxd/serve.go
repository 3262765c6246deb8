package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/sandboxd/sandboxd/internal/daemon"
)

func runServe(ctx context.Context, args []string) int {
	fs := flags("serve", "[FLAGS] [-- IGNORED...]")
	harness := harnessDirFlag(fs)
	workdir := fs.String("workdir", "", "the sandbox's working directory (default: the image's, else /)")
	agentUser := fs.String("agent-user", "", "user[:group] that agent sessions run as (default root)")
	degraded := fs.Bool("allow-degraded", false, "serve a sandbox weaker than declared (single-id map) and report it")
	bwrapPath := fs.String("bwrap", "bwrap", "the bubblewrap binary")
	hostMode := fs.Bool("host", false, "no container around sandboxd: also mask the host's sockets")
	logFormat := fs.String("log-format", "json", "json or text")
	taskSel := fs.String("task", os.Getenv("SANDBOXD_TASK"), "the task to serve: a task directory, or a task's name under the harness dir (env SANDBOXD_TASK)")
	var cidrs listFlag
	fs.Var(&cidrs, "egress-allow-cidr", "open an address range the egress guard refuses, deliberately (repeatable)")
	listen := fs.String("listen", "0.0.0.0:2222", "SSH listen address in the container's network (\"\" turns SSH off)")
	hostKey := fs.String("host-key", "", "SSH host key file (default: generated once into the harness dir)")
	authKeys := fs.String("authorized-keys", "", "agent keys, OpenSSH authorized_keys format (or env SANDBOXD_AUTHORIZED_KEYS; default: a generated key, see `sandboxd keys`)")
	harnessKeys := fs.String("harness-keys", "", "keys that may run control commands (status, grade, keys, records, stop) over SSH, never a shell")
	var acceptEnv listFlag
	fs.Var(&acceptEnv, "accept-env", "env request names (patterns) SSH clients may set, beyond LANG, LC_* and TERM (repeatable)")
	sessionTimeout := fs.Duration("session-timeout", 0, "kill an SSH session's whole tree after this long (0: never)")
	maxProcs := fs.Uint64("agent-max-procs", daemon.DefaultAgentMaxProcs, "processes a non-root agent user may have at once (RLIMIT_NPROC; 0: no limit; root is exempt by the kernel)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	var handler slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if *logFormat == "text" {
		handler = slog.NewTextHandler(os.Stderr, nil)
	}
	log := slog.New(handler)
	// Stock Harbor starts every image with `sh -c "sleep infinity"`. serve
	// itself ignores it; an image ENTRYPOINT gets it as its arguments, as
	// Docker would have given them (ENTRYPOINT + CMD).
	rest := fs.Args()
	cfg := daemon.Config{
		HarnessDir:    *harness,
		Workdir:       *workdir,
		AgentUser:     *agentUser,
		AllowDegraded: *degraded,
		Bwrap:         *bwrapPath,
		HostMode:      *hostMode,
		AgentMaxProcs: *maxProcs,
		Log:           log,
		SSH: daemon.SSH{
			Listen:         *listen,
			HostKey:        *hostKey,
			AcceptEnv:      acceptEnv,
			SessionTimeout: *sessionTimeout,
		},
	}
	keys, err := readKeys(*authKeys, os.Getenv("SANDBOXD_AUTHORIZED_KEYS"))
	if err != nil {
		return fail("serve: %v", err)
	}
	cfg.SSH.AuthorizedKeys = keys
	if cfg.SSH.HarnessKeys, err = readKeys(*harnessKeys, ""); err != nil {
		return fail("serve: %v", err)
	}
	cfg, err = daemon.Configure(cfg, *taskSel, cidrs, os.LookupEnv)
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	if len(cfg.Entrypoint) > 0 {
		cfg.Entrypoint = append(cfg.Entrypoint, rest...)
	} else if len(rest) > 0 {
		log.Info("ignoring the container's command", "argv", rest)
	}
	err = daemon.Run(ctx, cfg)
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	return 0
}

// readKeys reads a keys file and appends keys given by value (never by a
// mounted home: lesson 12).
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
