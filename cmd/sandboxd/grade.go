package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
		var f *control.Failure
		if errors.As(err, &f) {
			return failWithVerdict(*asJSON, f.Code, f.Message)
		}
		return failWithVerdict(*asJSON, grade.ExitInternal, err.Error())
	}
	return printVerdict(v, *asJSON)
}

// printVerdict prints the verdict, without the line for people under
// --json, and returns the exit code of its status.
func printVerdict(v grade.Verdict, asJSON bool) int {
	var stderr io.Writer = os.Stderr
	if asJSON {
		stderr = io.Discard
	}
	return v.Print(os.Stdout, stderr)
}

// failWithVerdict reports sandboxd's own failure, still as one JSON document
// under --json so that a harness parsing stdout never reads a reward of 0.
func failWithVerdict(asJSON bool, code int, msg string) int {
	if asJSON {
		b, _ := json.Marshal(map[string]any{"status": "error", "reward": nil, "message": msg})
		fmt.Println(string(b))
	}
	fmt.Fprintf(os.Stderr, "sandboxd: grade: %s\n", msg)
	return code
}
