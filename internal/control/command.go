package control

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/pkg/grade"
)

// ParseCommand reads the words of a harness key's command (an operation's
// name and its flags, as `sandboxd NAME ...` takes them: `grade --json`,
// `status --ready`, `records --since 10m`, `agent-done --status timeout`,
// `keys --authorize KEY`) into the request the daemon serves, and whether
// the answer is wanted as JSON. fields[0] is the operation's name, which
// the caller has checked; unknown flags are ignored, as before.
func ParseCommand(fields []string) (req Request, asJSON bool, err error) {
	name := fields[0]
	req = Request{Op: name}
	for i := 1; i < len(fields); i++ {
		switch {
		case name == "grade" && fields[i] == "--timeout" && i+1 < len(fields):
			i++
			if _, err := time.ParseDuration(fields[i]); err != nil {
				return req, false, fmt.Errorf("grade: bad --timeout %q", fields[i])
			}
			req.GradeTimeout = fields[i]
		case name == "grade" && fields[i] == "--json":
			asJSON = true
		case name == "status" && fields[i] == "--ready":
			req.Op = "ready"
		case name == "records" && fields[i] == "--since" && i+1 < len(fields):
			i++
			req.Since = fields[i]
		case name == "records" && fields[i] == "--session" && i+1 < len(fields):
			i++
			req.Session = fields[i]
		case name == "agent-done":
			if i, err = agentDoneArg(&req, fields, i); err != nil {
				return req, false, fmt.Errorf("agent-done: %w", err)
			}
		case name == "keys" && fields[i] == "--authorize":
			// The key line is the rest of the command: ssh joins its words.
			req.Authorize = strings.Join(fields[i+1:], " ")
			i = len(fields)
		}
	}
	return req, asJSON, nil
}

// agentDoneArg reads one argument of `agent-done --status S [--exit-code N]
// [--duration SEC] [--remote ADDR]` at fields[i], and returns the index of
// its last word.
func agentDoneArg(req *Request, fields []string, i int) (int, error) {
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
