package grade

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/pkg/collect"
)

// Status is the outcome of one grading, as the verdict JSON names it.
type Status string

// The five outcomes, each with its exit code (see the package
// documentation). Only StatusGraded carries a reward.
const (
	StatusGraded   Status = "graded"           // a finite reward was read
	StatusNoReward Status = "no_reward"        // the verifier left no reward, or an empty one
	StatusTimeout  Status = "verifier_timeout" // the verifier ran past its timeout and was killed
	StatusError    Status = "verifier_error"   // test.sh missing or unable to start, or an unusable reward
	// StatusUnhealthy is trial's: the task's healthcheck never passed, so
	// the agent never ran and nothing was graded, as Harbor ends such a
	// trial before its agent phase.
	StatusUnhealthy Status = "unhealthy"
	// StatusInternal is sandboxd's own failure: no daemon answered, no
	// task is served, or grading could not be carried out (Run returned an
	// error). It is never a verdict on the agent.
	StatusInternal Status = "error"
)

// Exit codes of `sandboxd grade` and `sandboxd trial` (see the package
// documentation).
const (
	ExitGraded        = 0
	ExitNoReward      = 3
	ExitTimeout       = 4
	ExitVerifierError = 5
	// ExitAgentTimeout is trial's graded run whose agent ran past
	// agent.timeout_sec: the reward is in the verdict, but it scores an
	// agent that was cut short.
	ExitAgentTimeout = 6
	ExitUnhealthy    = 7   // trial's: the healthcheck never passed
	ExitInternal     = 125 // sandboxd's own failure, as docker run and timeout(1) use it
)

// ExitCode is the process exit code that reports s.
func (s Status) ExitCode() int {
	switch s {
	case StatusGraded:
		return ExitGraded
	case StatusNoReward:
		return ExitNoReward
	case StatusTimeout:
		return ExitTimeout
	case StatusInternal:
		return ExitInternal
	case StatusUnhealthy:
		return ExitUnhealthy
	}
	return ExitVerifierError
}

// AgentStatus is how the agent's run ended, as Harbor's trial tells them
// apart: it grades after each.
type AgentStatus string

// The agent's outcomes.
const (
	AgentCompleted AgentStatus = "completed" // it ended by itself with status 0
	AgentTimeout   AgentStatus = "timeout"   // it ran past agent.timeout_sec; its session was ended, its processes were not
	AgentError     AgentStatus = "error"     // it ended with a non-zero status, or its session failed
)

// Agent is the agent's outcome, which trial reports beside the verdict
// (and a harness marks with agent-done): a verdict alone cannot say that
// the agent it scores was cut short.
type Agent struct {
	Status AgentStatus `json:"status"`
	// ExitCode is the agent command's exit status (128+N for signal N);
	// -1 when it did not end by itself.
	ExitCode    int     `json:"exit_code"`
	DurationSec float64 `json:"duration_sec"`
	Message     string  `json:"message,omitempty"`
}

// Exit is the process exit code that reports v: its status's, but a
// graded run whose agent timed out has a code of its own.
func (v Verdict) Exit() int {
	if v.Status == StatusGraded && v.Agent != nil && v.Agent.Status == AgentTimeout {
		return ExitAgentTimeout
	}
	return v.Status.ExitCode()
}

// Verdict is what one grading found; its JSON is what `sandboxd grade --json`
// prints.
type Verdict struct {
	Status Status `json:"status"`
	// Reward holds every metric of reward.json, or {"reward": x} from
	// reward.txt; nil (JSON null) unless Status is graded.
	Reward map[string]float64 `json:"reward"`
	// ExitCode is test.sh's exit code (128+N when signal N ended it); -1 when
	// it never ran or did not end by itself (timeout). Harbor ignores it for
	// the reward, and so do we; it is reported for people reading the verdict.
	ExitCode    int     `json:"exit_code"`
	DurationSec float64 `json:"duration_sec"`
	StdoutTail  string  `json:"stdout_tail"` // the end of test-stdout.txt
	Message     string  `json:"message,omitempty"`
	// Agent is the agent's outcome; only trial, which runs the agent,
	// knows it.
	Agent *Agent `json:"agent,omitempty"`
	// Collected is what followed the grading: the task's collect hooks and
	// artifacts, and where they went; nil when it declares neither.
	Collected *collect.Result `json:"collected,omitempty"`
}

// Internal is the verdict that reports sandboxd's own failure, with why.
func Internal(msg string) Verdict {
	return Verdict{Status: StatusInternal, ExitCode: -1, Message: msg}
}

// Print writes v as `sandboxd grade` and `trial` print it, at the CLI and
// at a harness key's door alike: its JSON document on stdout, the one
// encoding of a verdict, and a line for people on stderr. It returns the
// exit code that reports v.
func (v Verdict) Print(stdout, stderr io.Writer) int {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	switch {
	case v.Status == StatusGraded && v.Exit() == ExitAgentTimeout:
		fmt.Fprintf(stderr, "sandboxd: graded: reward %v (the agent timed out after %.1fs)\n", v.Reward, v.Agent.DurationSec)
	case v.Status == StatusGraded:
		fmt.Fprintf(stderr, "sandboxd: graded: reward %v\n", v.Reward)
	default:
		fmt.Fprintf(stderr, "sandboxd: %s: %s (this is not a score)\n", v.Status, v.Message)
	}
	return v.Exit()
}
