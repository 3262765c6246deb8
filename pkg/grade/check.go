package grade

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/internal/memfd"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// CheckConfig is one healthcheck: a command run as a visitor, like the
// verifier but with no tests and no verdict, so the agent never sees it run.
type CheckConfig struct {
	Target     join.Target
	HarnessDir string // masked from the check, with every other harness dir beside it
	User       idmap.User
	Env        []string
	Workdir    string
	Argv       []string
	Timeout    time.Duration
	Mask       []string
	Hosts      string // as Config.Hosts
}

// CheckResult is how a healthcheck ended.
type CheckResult struct {
	Code     int    // the command's exit code; -1 when it timed out or could not start
	TimedOut bool   // it ran past its timeout and its tree was killed
	Output   string // the end of what it printed
}

// Check runs one healthcheck. A non-nil error means sandboxd itself failed.
func Check(ctx context.Context, cfg CheckConfig) (CheckResult, error) {
	out, err := memfd.New("healthcheck-output", nil)
	if err != nil {
		return CheckResult{}, fmt.Errorf("healthcheck: %w", err)
	}
	defer out.Close()
	harness, err := harnessID(cfg.HarnessDir)
	if err != nil {
		return CheckResult{}, err
	}
	hosts, err := beneathHarness(cfg.HarnessDir, cfg.Hosts)
	if err != nil {
		return CheckResult{}, err
	}
	params := visitorParams{
		Harness: harness,
		Mask:    masks(Config{HarnessDir: cfg.HarnessDir, Mask: cfg.Mask}),
		Hosts:   hosts,
		Spec:    join.Spec{User: cfg.User, Env: cfg.Env, Dir: cfg.Workdir, Argv: cfg.Argv},
	}
	run, err := runVisitor(ctx, cfg.Target, params, out, cfg.Timeout)
	if err != nil {
		return CheckResult{}, err
	}
	res := CheckResult{Code: -1, TimedOut: run.timedOut, Output: readTail(out)}
	switch {
	case run.interrupted != nil:
		return res, run.interrupted
	case run.timedOut:
		return res, nil
	case run.result == nil:
		return res, fmt.Errorf("healthcheck: the visitor ended without a report (%v): %s", run.waitErr, run.stderr)
	case run.result.Setup != "":
		return res, fmt.Errorf("healthcheck: %s", run.result.Setup)
	case run.result.Start != "":
		res.Output = run.result.Start
		return res, nil
	}
	res.Code = run.result.Code
	return res, nil
}
