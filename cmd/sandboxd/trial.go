package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/sandboxd/sandboxd/internal/trial"
)

func runTrial(ctx context.Context, args []string) int {
	fs := flags("trial", "TASK_DIR [--agent oracle|nop|CMD] [--json]")
	agent := fs.String("agent", "oracle", "the `AGENT`: oracle (solution/solve.sh), nop, or a command run in the sandbox as the agent")
	asJSON := fs.Bool("json", false, "print exactly one JSON document on stdout")
	harness := fs.String("harness-dir", "", "the trial's own harness `DIR` (default: a fresh one, removed afterwards)")
	artifacts := fs.String("artifacts-dir", "", "keep the task's artifacts and collect hooks' output in `DIR`, new or empty (default: a fresh one under $TMPDIR, when the task declares any)")
	bwrapPath := fs.String("bwrap", "bwrap", "the bubblewrap binary, a `PATH` or a name on PATH")
	verbose := fs.Bool("v", false, "log what the daemon does")
	cidrs := &listFlag{check: checkCIDR}
	agentHosts, envHosts := runtimeHostFlags(fs)
	fs.Var(cidrs, "egress-allow-cidr", "open an address range the egress guard refuses, deliberately: a `CIDR` such as 10.1.0.0/16 (repeatable)")
	// The task directory may come before or after the flags.
	var taskDir string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		taskDir, args = args[0], args[1:]
	}
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if err := settingsFromEnv(fs, os.LookupEnv, "allow-agent-host", "allow-environment-host"); err != nil {
		return usageError(fs, "%v", err)
	}
	rest := fs.Args()
	if taskDir == "" && len(rest) > 0 {
		taskDir, rest = rest[0], rest[1:]
	}
	if taskDir == "" {
		return usageError(fs, "name a task directory")
	}
	if len(rest) > 0 {
		return usageError(fs, "unexpected argument %q: a trial runs one task", rest[0])
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	v, err := trial.Run(ctx, trial.Config{
		TaskDir:      taskDir,
		Agent:        *agent,
		HarnessDir:   *harness,
		ArtifactsDir: *artifacts,
		Bwrap:        *bwrapPath,
		AllowCIDRs:   cidrs.vals,
		AgentHosts:   agentHosts.vals,
		EnvHosts:     envHosts.vals,
		Log:          log,
		Stderr:       os.Stderr,
	})
	if err != nil {
		return failWithVerdict(*asJSON, "trial: "+err.Error())
	}
	return printVerdict(v, *asJSON)
}

// settingsFromEnv gives the named flags that the command line did not give
// the value of their SANDBOXD_ variable, as serve's settings do.
func settingsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool), names ...string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range names {
		env := serveEnv(name)
		if v, ok := lookup(env); ok && !given[name] {
			if err := setFromEnv(fs.Lookup(name), env, v); err != nil {
				return err
			}
		}
	}
	return nil
}
