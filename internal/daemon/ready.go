package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
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
		if err := sshAnswers(d.ssh.listener.Addr()); err != nil {
			why = append(why, "SSH does not answer: "+err.Error())
		}
	}
	if passed, state := d.HealthPassed(); !passed {
		why = append(why, fmt.Sprintf("the task's healthcheck has not passed yet (%s)", state))
	}
	return Readiness{Ready: len(why) == 0, Reasons: why}, nil
}

// sshAnswers connects to the SSH listener and reads the server's version
// line: proof that sessions are accepted, not only that a socket is bound.
func sshAnswers(addr net.Addr) error {
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("listener address %v", addr)
	}
	dial := *a
	var c net.Conn
	var err error
	if dial.IP.IsUnspecified() {
		// Go listens on 0.0.0.0 as a dual-stack [::]: IPv4 loopback is
		// the one a container always has (Docker's have no ::1 without
		// IPv6), and the wildcard takes it; ::1 is for an IPv6-only one.
		for _, ip := range []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback} {
			dial.IP = ip
			if c, err = net.DialTimeout("tcp", dial.String(), 2*time.Second); err == nil {
				break
			}
		}
	} else {
		c, err = net.DialTimeout("tcp", dial.String(), 2*time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no version line from %s: %w", dial.String(), err)
	}
	if !strings.HasPrefix(line, "SSH-2.0-") {
		return fmt.Errorf("%s answered %q, not SSH", dial.String(), strings.TrimSpace(line))
	}
	return nil
}
