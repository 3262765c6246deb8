package main

import (
	"context"
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
	if ok, code := parse(fs, args); !ok {
		return code
	}
	var handler slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if *logFormat == "text" {
		handler = slog.NewTextHandler(os.Stderr, nil)
	}
	log := slog.New(handler)
	if rest := fs.Args(); len(rest) > 0 {
		// Stock Harbor starts every image with `sh -c "sleep infinity"`.
		log.Info("ignoring the container's command", "argv", rest)
	}
	stopReaper := daemon.ReapOrphans(ctx, log)
	defer stopReaper()
	cfg := daemon.Config{
		HarnessDir:    *harness,
		Workdir:       *workdir,
		AgentUser:     *agentUser,
		AllowDegraded: *degraded,
		Bwrap:         *bwrapPath,
		HostMode:      *hostMode,
		Log:           log,
	}
	cfg, err := daemon.Configure(cfg, *taskSel, cidrs, os.LookupEnv)
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	err = daemon.Run(ctx, cfg)
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	return 0
}
