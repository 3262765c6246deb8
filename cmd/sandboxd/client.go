package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/control/wire"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/execclient"
)

// runExec is `sandboxd exec`. Its common case does not get here: package
// execclient runs it from an init, before this binary's other packages
// are initialized; what reaches here is the rest (a terminal, help, a usage
// error), parsed by the full parser and run by the same execclient.Run.
func runExec(ctx context.Context, args []string) int {
	harness, req, ok, code := parseExec(args)
	if !ok {
		return code
	}
	var resizes chan wire.Resize
	if req.TTY {
		req.Term = os.Getenv("TERM")
		if req.Term == "" {
			req.Term = "xterm"
		}
		fd := int(os.Stdin.Fd())
		if term.IsTerminal(fd) {
			if cols, rows, err := term.GetSize(fd); err == nil {
				req.Cols, req.Rows = cols, rows
			}
			if req.Stdin {
				// The remote terminal does the echoing and line editing.
				if old, err := term.MakeRaw(fd); err == nil {
					defer term.Restore(fd, old)
				}
			}
			resizes = make(chan wire.Resize, 1)
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for range winch {
					if cols, rows, err := term.GetSize(fd); err == nil {
						select {
						case resizes <- wire.Resize{Cols: cols, Rows: rows}:
						default:
						}
					}
				}
			}()
		}
	}
	// ctx ends on a SIGTERM or SIGINT that comes before Run's own signal
	// handling is set up.
	return execclient.Run(ctx, harness, req, resizes)
}

// parseExec reads exec's flags and command; with ok false, the command
// ends with code (help printed, or a usage error).
func parseExec(args []string) (harness string, req execclient.Request, ok bool, code int) {
	fs := flags("exec", "[-u USER] [-w DIR] [-e K=V]... [-t] [-i] [--timeout DUR] -- ARGV...")
	harnessDir := harnessDirFlag(fs)
	user := fs.String("u", "", "the `USER[:GROUP]` to run as (default: the agent user)")
	dir := fs.String("w", "", "the working `DIR` inside the sandbox (default: the workdir)")
	env := &listFlag{}
	fs.Var(env, "e", "set an environment variable: `NAME=VALUE` (repeatable)")
	tty := fs.Bool("t", false, "allocate a terminal")
	stdin := fs.Bool("i", false, "forward stdin")
	timeout := fs.String("timeout", "", "kill the command's whole tree after this `DURATION` (exit 124)")
	if ok, code := parse(fs, args); !ok {
		return "", req, false, code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return "", req, false, usageError(fs, "no command given: write sandboxd exec [FLAGS] -- COMMAND [ARG...]")
	}
	req = execclient.Request{Argv: argv, User: *user, Dir: *dir, Env: env.vals, TTY: *tty, Stdin: *stdin, Timeout: *timeout}
	return *harnessDir, req, true, 0
}

// runOp is a command that asks the daemon one operation of its table
// (status, keys, records, stop): it decodes the operation's typed result
// and prints it as the harness door prints it too.
func runOp[R daemon.Result](name string) func(ctx context.Context, args []string) int {
	return func(ctx context.Context, args []string) int {
		fs := flags(name, "[--harness-dir DIR]")
		harness := harnessDirFlag(fs)
		if ok, code := noArgs(fs, args); !ok {
			return code
		}
		var res R
		if err := (control.Client{HarnessDir: *harness}).Call(ctx, control.Request{Op: name}, &res); err != nil {
			return fail("%s: %v", name, err)
		}
		return res.Print(os.Stdout, os.Stderr)
	}
}
