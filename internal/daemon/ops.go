package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// Result is an operation's typed answer. The control socket sends it as one
// JSON document, which the CLI decodes into the same type; the CLI and the
// harness door then print it alike, with Print.
type Result interface {
	// Print writes the result as `sandboxd OP` prints it and returns the
	// exit code that reports it.
	Print(stdout, stderr io.Writer) int
}

// operation answers one request; an error is a *control.Failure, or
// sandboxd's own failure (125).
type operation func(d *Daemon, req control.Request) (Result, error)

// operations is every operation the daemon answers but exec, for both
// doors: the control socket and a harness key over SSH. A harness key may
// run exactly these; exec is a stream, served on the control socket alone,
// and never to a harness key, which gets no command of its own.
var operations = map[string]operation{
	"status":     typed((*Daemon).status),
	"grade":      typed((*Daemon).gradeOp),
	"keys":       typed((*Daemon).keys),
	"records":    typed((*Daemon).records),
	"ready":      typed((*Daemon).readyOp),
	"agent-done": typed((*Daemon).agentDone),
	"stop":       typed((*Daemon).stopOp),
}

// typed lets each operation declare the type of its result.
func typed[R Result](f func(*Daemon, control.Request) (R, error)) operation {
	return func(d *Daemon, req control.Request) (Result, error) { return f(d, req) }
}

// opNames lists the operations for messages, and exec with them when the
// door serves it.
func opNames(withExec bool) string {
	var names []string
	for n := range operations {
		names = append(names, n)
	}
	if withExec {
		names = append(names, "exec", "cp")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// failure is err as the doors report it.
func failure(err error) *control.Failure {
	var f *control.Failure
	if errors.As(err, &f) {
		return f
	}
	return &control.Failure{Code: grade.ExitInternal, Message: err.Error()}
}

// handle serves one control-socket connection: one request.
func (d *Daemon) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	conn := control.NewConn(c)
	kind, payload, err := conn.Read()
	if err != nil || kind != control.KindJSON {
		return
	}
	var req control.Request
	if err := json.Unmarshal(payload, &req); err != nil {
		conn.WriteJSON(control.KindError, control.Failure{Code: 125, Message: "bad request: " + err.Error()})
		return
	}
	if req.Op == "exec" {
		d.exec(ctx, conn, c, req)
		return
	}
	if req.Op == "cp" {
		d.copy(ctx, conn, c, req)
		return
	}
	op, ok := operations[req.Op]
	if !ok {
		conn.WriteJSON(control.KindError, control.Failure{Code: 125, Message: fmt.Sprintf("unknown operation %q: this sandboxd (%s) knows %s", req.Op, Version, opNames(true))})
		return
	}
	res, err := op(d, req)
	if err != nil {
		conn.WriteJSON(control.KindError, failure(err))
		return
	}
	conn.WriteJSON(control.KindJSON, res)
}

// harnessCommand runs one operation for a harness key over SSH, given as
// its command line (`sandboxd grade --timeout 10m`), and prints its result
// as the CLI does. Nothing else: a harness key never gets a shell, in the
// sandbox or the substrate.
func (d *Daemon) harnessCommand(_ context.Context, command string, stdout, stderr io.Writer) int {
	fields := strings.Fields(command)
	if len(fields) > 0 && (fields[0] == "sandboxd" || strings.HasSuffix(fields[0], "/sandboxd")) {
		fields = fields[1:]
	}
	if len(fields) == 0 {
		fmt.Fprintf(stderr, "sandboxd: a harness key runs control commands only: %s\n", opNames(false))
		return 2
	}
	name := fields[0]
	if _, ok := operations[name]; !ok {
		fmt.Fprintf(stderr, "sandboxd: %q is not a control command; a harness key may run %s\n", name, opNames(false))
		return 2
	}
	req, asJSON, err := control.ParseCommand(fields)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return 2
	}
	res, err := operations[req.Op](d, req)
	if err != nil {
		f := failure(err)
		if name != "grade" {
			fmt.Fprintf(stderr, "sandboxd: %s: %s\n", name, f.Message)
			return f.Code
		}
		// As the CLI: sandboxd's own failure is a verdict too, a document
		// on stdout under --json, its reason on stderr either way.
		if !asJSON {
			stdout = io.Discard
		}
		return grade.Internal(f.Message).Print(stdout, stderr)
	}
	if asJSON {
		stderr = io.Discard
	}
	return res.Print(stdout, stderr)
}

func (d *Daemon) status(control.Request) (Status, error) { return d.Status(), nil }

// Print writes the status as one JSON document.
func (s Status) Print(stdout, _ io.Writer) int { return printJSON(stdout, s) }

// gradeOp grades for either door. A grading outlives the connection that
// asked for it: a harness that drops mid-grade finds the verdict in
// /logs/verifier, and in the next status.
func (d *Daemon) gradeOp(req control.Request) (grade.Verdict, error) {
	var timeout time.Duration
	if req.GradeTimeout != "" {
		t, err := time.ParseDuration(req.GradeTimeout)
		if err != nil || t <= 0 {
			return grade.Verdict{}, &control.Failure{Code: 125, Message: fmt.Sprintf("bad --timeout %q: write a positive duration such as 10m", req.GradeTimeout)}
		}
		timeout = t
	}
	v, err := d.Grade(d.serveCtx, timeout)
	if err != nil {
		return v, err
	}
	d.log.Info("graded", "status", v.Status, "reward", v.Reward, "exit_code", v.ExitCode, "duration_sec", v.DurationSec)
	return v, nil
}

// Keys is what keys answers: the agent key serve generated, or with
// --authorize the fingerprints of the agent keys it now accepts too.
type Keys struct {
	PrivateKey string   `json:"private_key,omitempty"`
	Authorized []string `json:"authorized,omitempty"`
}

// Print writes the private key as it is, for a file or ssh -i, or one line
// per key authorized.
func (k Keys) Print(stdout, _ io.Writer) int {
	for _, fp := range k.Authorized {
		fmt.Fprintf(stdout, "authorized %s\n", fp)
	}
	io.WriteString(stdout, k.PrivateKey)
	return 0
}

func (d *Daemon) keys(req control.Request) (Keys, error) {
	if d.ssh == nil {
		return Keys{}, &control.Failure{Code: 125, Message: "SSH is off (serve --listen ADDR turns it on)"}
	}
	if req.Authorize != "" {
		added, had, err := d.ssh.server.AuthorizeAgentKeys([]byte(req.Authorize))
		if err != nil {
			return Keys{}, &control.Failure{Code: 125, Message: err.Error()}
		}
		k := Keys{}
		for _, a := range append(added, had...) {
			k.Authorized = append(k.Authorized, a.Fingerprint())
		}
		d.log.Info("agent keys authorized", "added", len(added), "already", len(had), "keys", k.Authorized)
		return k, nil
	}
	if d.ssh.agentKey == nil {
		return Keys{}, &control.Failure{Code: 125, Message: "the agent keys were given to serve (--authorized-keys or SANDBOXD_AUTHORIZED_KEYS); it holds no private key to print"}
	}
	return Keys{PrivateKey: string(d.ssh.agentKey)}, nil
}

// Stopping is what stop answers, as the daemon begins to stop.
type Stopping struct {
	Status string `json:"status"` // "stopping"
}

// Print says so on stderr: stop prints no document.
func (Stopping) Print(_, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sandboxd: stopping")
	return 0
}

// stopOp begins serve's end. The answer still reaches the client: serve
// waits for its control connections, and gives SSH sessions a grace.
func (d *Daemon) stopOp(control.Request) (Stopping, error) {
	d.stop()
	return Stopping{Status: "stopping"}, nil
}

func printJSON(w io.Writer, v any) int {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
	return 0
}
