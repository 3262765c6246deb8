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
	err := daemon.Run(ctx, daemon.Config{
		HarnessDir:    *harness,
		Workdir:       *workdir,
		AgentUser:     *agentUser,
		AllowDegraded: *degraded,
		Bwrap:         *bwrapPath,
		HostMode:      *hostMode,
		Log:           log,
	})
	if err != nil {
		log.Error("serve failed", "err", err)
		return fail("serve: %v", err)
	}
	return 0
}
