package main

import (
	"context"
	"errors"
	"os"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
)

func runRecords(ctx context.Context, args []string) int {
	fs := flags("records", "[--since TIME|DURATION] [--session ID]")
	harness := harnessDirFlag(fs)
	since := fs.String("since", "", "only sessions that ended at or after `TIME` (RFC 3339, or a duration back from now: 10m)")
	session := fs.String("session", "", "only the session whose record `ID` this is")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	var res daemon.Records
	err := control.Client{HarnessDir: *harness}.Call(ctx, control.Request{Op: "records", Since: *since, Session: *session}, &res)
	var f *control.Failure
	if errors.As(err, &f) && f.Code == exitUsage {
		return usageError(fs, "%s", f.Message)
	}
	if err != nil {
		return fail("records: %v", err)
	}
	return res.Print(os.Stdout, os.Stderr)
}
