package daemon

import (
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/sshd"
)

// Readiness is what `status --ready` answers: whether a session would be
// served now, and if not, why.
type Readiness struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
}

// Print says it in one line; the exit code is the probe's answer: 0 ready,
// 1 not (Docker HEALTHCHECK's healthy and unhealthy).
func (r Readiness) Print(stdout, _ io.Writer) int {
	if r.Ready {
		fmt.Fprintln(stdout, "ready")
		return 0
	}
	fmt.Fprintf(stdout, "not ready: %s\n", strings.Join(r.Reasons, "; "))
	return 1
}

// readyOp checks what a session needs, the control socket answering being
// the first of them: serve is not stopping, the sandbox lives, SSH (when
// configured) answers with its banner, and the task's healthcheck (when
// it has one) has passed.
func (d *Daemon) readyOp(control.Request) (Readiness, error) {
	var why []string
	if d.serveCtx != nil && d.serveCtx.Err() != nil {
		why = append(why, "serve is stopping")
	}
	if d.holderGone() {
		why = append(why, "the sandbox is gone (its holder died)")
	}
	if d.ssh != nil {
		if err := sshd.Answers(d.ssh.listener.Addr()); err != nil {
			why = append(why, "SSH does not answer: "+err.Error())
		}
	}
	if passed, state := d.HealthPassed(); !passed {
		why = append(why, fmt.Sprintf("the task's healthcheck has not passed yet (%s)", state))
	}
	return Readiness{Ready: len(why) == 0, Reasons: why}, nil
}
