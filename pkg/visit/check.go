package visit

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/internal/memfd"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// CheckResult is how a healthcheck ended.
type CheckResult struct {
	Code     int    // the command's exit code; -1 when it timed out or could not start
	TimedOut bool   // it ran past its timeout and its tree was killed
	Output   string // the end of what it printed
}

// Check runs one healthcheck: spec as a visitor with view (no tests, no
// verdict), so the agent never sees it run. A non-nil error means sandboxd
// itself failed.
func Check(ctx context.Context, target join.Target, view View, spec join.Spec, timeout time.Duration) (CheckResult, error) {
	out, err := memfd.New("healthcheck-output", nil)
	if err != nil {
		return CheckResult{}, fmt.Errorf("healthcheck: %w", err)
	}
	defer out.Close()
	o, err := Run(ctx, target, view, spec, out, timeout)
	if err != nil {
		return CheckResult{}, err
	}
	res := CheckResult{Code: -1, TimedOut: o.TimedOut, Output: Tail(out)}
	switch {
	case o.Interrupted != nil:
		return res, o.Interrupted
	case o.TimedOut:
		return res, nil
	case o.Report == nil:
		return res, fmt.Errorf("healthcheck: the visitor ended without a report (%v): %s", o.WaitErr, o.Stderr)
	case o.Report.Setup != "":
		return res, fmt.Errorf("healthcheck: %s", o.Report.Setup)
	case o.Report.Start != "":
		res.Output = o.Report.Start
		return res, nil
	}
	res.Code = o.Report.Code
	return res, nil
}
