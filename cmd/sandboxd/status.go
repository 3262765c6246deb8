package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
)

func runStatus(ctx context.Context, args []string) int {
	fs := flags("status", "[--ready]")
	harness := harnessDirFlag(fs)
	ready := fs.Bool("ready", false, "print nothing but whether a session would be served now, and exit 0 only then: a readiness probe (Docker HEALTHCHECK, Kubernetes)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	client := control.Client{HarnessDir: *harness}
	if *ready {
		var r daemon.Readiness
		if err := client.Call(ctx, control.Request{Op: "ready"}, &r); err != nil {
			// A probe's answer is 0 or 1, whatever kept the daemon from
			// giving it.
			fmt.Printf("not ready: %v\n", err)
			return 1
		}
		return r.Print(os.Stdout, os.Stderr)
	}
	var st daemon.Status
	if err := client.Call(ctx, control.Request{Op: "status"}, &st); err != nil {
		return fail("status: %v", err)
	}
	return st.Print(os.Stdout, os.Stderr)
}
