package daemon

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// AgentMarked is what agent-done answers: the mark's own record.
type AgentMarked struct {
	ID string `json:"id"`
}

// Print says so on stderr: agent-done prints no document.
func (m AgentMarked) Print(_, stderr io.Writer) int {
	fmt.Fprintf(stderr, "sandboxd: agent outcome recorded (%s)\n", m.ID)
	return 0
}

// agentDone records how the agent's run ended, as the harness that ran it
// says (trial does after every agent): a record of kind "agent", whose
// outcome `records` also puts on the agent's own session, the one whose
// client address is req.Remote. Only the harness knows it; the daemon
// cannot tell the agent's session from any other.
func (d *Daemon) agentDone(req control.Request) (AgentMarked, error) {
	a := req.Agent
	if a == nil || !slices.Contains([]grade.AgentStatus{grade.AgentCompleted, grade.AgentTimeout, grade.AgentError}, a.Status) {
		return AgentMarked{}, &control.Failure{Code: 2, Message: "agent-done needs --status completed, timeout or error"}
	}
	now := time.Now()
	rec := records.Record{ID: records.NewID(now), Kind: "agent", Via: "control", Remote: req.Remote,
		Start: now.Add(-time.Duration(a.DurationSec * float64(time.Second))), End: now, Exit: a.ExitCode, Agent: a}
	if err := d.recs.Write(&rec); err != nil {
		return AgentMarked{}, err
	}
	d.log.Info("agent outcome", "status", a.Status, "exit", a.ExitCode, "duration_sec", a.DurationSec, "session_remote", req.Remote)
	return AgentMarked{ID: rec.ID}, nil
}
