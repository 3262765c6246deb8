package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
)

func runExec(ctx context.Context, args []string) int {
	fs := flags("exec", "[-u USER] [-w DIR] [-e K=V]... [-t] [-i] [--timeout DUR] -- ARGV...")
	harness := harnessDirFlag(fs)
	user := fs.String("u", "", "the `USER[:GROUP]` to run as (default: the agent user)")
	dir := fs.String("w", "", "the working `DIR` inside the sandbox (default: the workdir)")
	env := &listFlag{}
	fs.Var(env, "e", "set an environment variable: `NAME=VALUE` (repeatable)")
	tty := fs.Bool("t", false, "allocate a terminal")
	stdin := fs.Bool("i", false, "forward stdin")
	timeout := fs.String("timeout", "", "kill the command's whole tree after this `DURATION` (exit 124)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usageError(fs, "no command given: write sandboxd exec [FLAGS] -- COMMAND [ARG...]")
	}
	req := control.Request{Argv: argv, User: *user, Dir: *dir, Env: env.vals, TTY: *tty, Stdin: *stdin, Timeout: *timeout}
	streams := control.Streams{Stdout: os.Stdout, Stderr: os.Stderr}
	if *stdin {
		streams.Stdin = os.Stdin
	}
	if *tty {
		req.Term = os.Getenv("TERM")
		if req.Term == "" {
			req.Term = "xterm"
		}
		fd := int(os.Stdin.Fd())
		if term.IsTerminal(fd) {
			if cols, rows, err := term.GetSize(fd); err == nil {
				req.Cols, req.Rows = cols, rows
			}
			if *stdin {
				// The remote terminal does the echoing and line editing.
				if old, err := term.MakeRaw(fd); err == nil {
					defer term.Restore(fd, old)
				}
			}
			resizes := make(chan control.Resize, 1)
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for range winch {
					if cols, rows, err := term.GetSize(fd); err == nil {
						select {
						case resizes <- control.Resize{Cols: cols, Rows: rows}:
						default:
						}
					}
				}
			}()
			streams.Resize = resizes
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	names := make(chan string, 4)
	go func() {
		for s := range sigs {
			switch s {
			case syscall.SIGHUP:
				names <- "HUP"
			case syscall.SIGUSR1:
				names <- "USR1"
			case syscall.SIGUSR2:
				names <- "USR2"
			}
		}
	}()
	streams.Signal = names
	exit, err := control.Client{HarnessDir: *harness}.Exec(ctx, req, streams)
	if err != nil {
		var f *control.Failure
		if errors.As(err, &f) {
			fmt.Fprintf(os.Stderr, "sandboxd: exec: %s\n", f.Message)
			return f.Code
		}
		return fail("exec: %v", err)
	}
	if exit.TimedOut {
		fmt.Fprintf(os.Stderr, "sandboxd: exec: timed out after %s; the command's whole tree was killed\n", *timeout)
		return exitTimeout
	}
	return exit.Code
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
