package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

// exitCopy is a copy that failed for its own reason (a missing source,
// docker's placement errors, an entry refused), as docker cp exits.
const exitCopy = 1

func runCp(ctx context.Context, args []string) int {
	fs := flags("cp", "[-u USER] [-a] SRC sandbox:DST | sandbox:SRC DST   (- is a tar stream on stdin or stdout)")
	harness := harnessDirFlag(fs)
	user := fs.String("u", "", "the `USER[:GROUP]` that owns what is copied into the sandbox (default: the agent user)")
	archive := fs.Bool("a", false, "keep the archive's uids, gids and setuid/setgid bits")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 2 {
		return usageError(fs, "name SRC and DST, one of them sandbox:PATH")
	}
	err := tarcopy.Run(ctx, control.Client{HarnessDir: *harness}, tarcopy.Copy{
		Src: fs.Arg(0), Dst: fs.Arg(1), User: *user, Archive: *archive,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	var f *control.Failure
	switch {
	case err == nil:
		return 0
	case errors.Is(err, tarcopy.ErrUsage):
		return usageError(fs, "%v", err)
	case errors.As(err, &f):
		fmt.Fprintf(os.Stderr, "sandboxd: cp: %s\n", f.Message)
		return f.Code
	case errors.Is(err, control.ErrNoDaemon):
		return fail("cp: %v", err)
	}
	fmt.Fprintf(os.Stderr, "sandboxd: cp: %v\n", err)
	return exitCopy
}
