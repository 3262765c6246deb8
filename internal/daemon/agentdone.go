package daemon

import (
	"fmt"
	"io"
	"slices"
	"strconv"
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

// agentDoneArg reads one argument of a harness key's `agent-done --status S
// [--exit-code N] [--duration SEC] [--remote ADDR]` at fields[i], and
// returns the index of its last word.
func agentDoneArg(req *control.Request, fields []string, i int) (int, error) {
	if req.Agent == nil {
		req.Agent = &grade.Agent{}
	}
	if i+1 >= len(fields) {
		return i, fmt.Errorf("%s needs a value", fields[i])
	}
	v := fields[i+1]
	switch fields[i] {
	case "--status":
		req.Agent.Status = grade.AgentStatus(v)
	case "--exit-code":
		n, err := strconv.Atoi(v)
		if err != nil {
			return i, fmt.Errorf("bad --exit-code %q", v)
		}
		req.Agent.ExitCode = n
	case "--duration":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return i, fmt.Errorf("bad --duration %q: seconds", v)
		}
		req.Agent.DurationSec = f
	case "--remote":
		req.Remote = v
	default:
		return i, fmt.Errorf("unknown argument %q", fields[i])
	}
	return i + 1, nil
}
