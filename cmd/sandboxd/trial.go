package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

func runTrial(ctx context.Context, args []string) int {
	fs := flags("trial", "TASK_DIR [--agent oracle|nop|CMD] [--json]")
	agent := fs.String("agent", "oracle", "oracle (solution/solve.sh), nop, or a command run in the sandbox as the agent")
	asJSON := fs.Bool("json", false, "print exactly one JSON document on stdout")
	harness := fs.String("harness-dir", "", "the trial's own harness dir (default: a fresh one, removed afterwards)")
	bwrapPath := fs.String("bwrap", "bwrap", "the bubblewrap binary")
	verbose := fs.Bool("v", false, "log what the daemon does")
	var cidrs listFlag
	fs.Var(&cidrs, "egress-allow-cidr", "open an address range the egress guard refuses, deliberately (repeatable)")
	// The task directory may come before or after the flags.
	var taskDir string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		taskDir, args = args[0], args[1:]
	}
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if taskDir == "" && fs.NArg() > 0 {
		taskDir = fs.Arg(0)
	}
	if taskDir == "" {
		return fail("trial: name a task directory: sandboxd trial TASK_DIR")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	v, err := daemon.RunTrial(ctx, daemon.Trial{
		TaskDir:    taskDir,
		Agent:      *agent,
		HarnessDir: *harness,
		Bwrap:      *bwrapPath,
		AllowCIDRs: cidrs,
		Log:        log,
		Stderr:     os.Stderr,
	})
	if err != nil {
		return failWithVerdict(*asJSON, grade.ExitInternal, "trial: "+err.Error())
	}
	return printVerdict(v, *asJSON)
}
