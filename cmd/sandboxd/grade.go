package main

import (
	"context"
	"io"
	"os"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

func runGrade(ctx context.Context, args []string) int {
	fs := flags("grade", "[--timeout DUR] [--json]")
	harness := harnessDirFlag(fs)
	timeout := fs.String("timeout", "", "the verifier's timeout, a `DURATION` (default: the task's verifier.timeout_sec)")
	asJSON := fs.Bool("json", false, "print exactly one JSON document on stdout")
	if ok, code := noArgs(fs, args); !ok {
		return code
	}
	var v grade.Verdict
	err := control.Client{HarnessDir: *harness}.Call(ctx, control.Request{Op: "grade", GradeTimeout: *timeout}, &v)
	if err != nil {
		return failWithVerdict(*asJSON, err.Error())
	}
	return printVerdict(v, *asJSON)
}

// printVerdict prints the verdict (grade's, or trial's result that holds
// one), without the line for people under --json, and returns the exit
// code of its status.
func printVerdict(v interface {
	Print(stdout, stderr io.Writer) int
}, asJSON bool) int {
	var stderr io.Writer = os.Stderr
	if asJSON {
		stderr = io.Discard
	}
	return v.Print(os.Stdout, stderr)
}

// failWithVerdict reports sandboxd's own failure as the verdict that says
// so (status error, exit 125): under --json still one JSON document on
// stdout, so that a harness parsing stdout never reads a reward of 0, and
// the reason on stderr either way.
func failWithVerdict(asJSON bool, msg string) int {
	stdout := io.Discard
	if asJSON {
		stdout = os.Stdout
	}
	return grade.Internal(msg).Print(stdout, os.Stderr)
}
