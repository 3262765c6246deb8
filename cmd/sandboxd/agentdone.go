package main

import (
	"context"
	"errors"
	"os"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// runAgentDone marks how the agent's run ended, for a harness that drives
// serve itself: records then shows the outcome on the agent's session.
func runAgentDone(ctx context.Context, args []string) int {
	fs := flags("agent-done", "--status completed|timeout|error [--exit-code N] [--duration SEC] [--remote ADDR]")
	harness := harnessDirFlag(fs)
	status := fs.String("status", "", "how the agent's run ended, `STATUS`: completed, timeout or error")
	code := fs.Int("exit-code", 0, "the agent command's exit `STATUS` (-1: it did not end by itself)")
	dur := fs.Float64("duration", 0, "how long the agent ran, in `SECONDS`")
	remote := fs.String("remote", "", "the client `ADDR` (host:port) of the agent's SSH session, as its record names it")
	if ok, c := parse(fs, args); !ok {
		return c
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	req := control.Request{Op: "agent-done", Remote: *remote,
		Agent: &grade.Agent{Status: grade.AgentStatus(*status), ExitCode: *code, DurationSec: *dur}}
	var res daemon.AgentMarked
	err := control.Client{HarnessDir: *harness}.Call(ctx, req, &res)
	var f *control.Failure
	if errors.As(err, &f) && f.Code == exitUsage {
		return usageError(fs, "%s", f.Message)
	}
	if err != nil {
		return fail("agent-done: %v", err)
	}
	return res.Print(os.Stdout, os.Stderr)
}
