// Command sandboxd serves one bubblewrap sandbox for an agent-benchmark
// rollout, lets agents in, and grades the result. Each subcommand is one call
// into the packages that do the work.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/execclient"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// Exit codes shared by every subcommand, as shells, docker run and
// timeout(1) use them.
const (
	exitUsage = 2                  // the command line is wrong: an unknown command or flag, a bad or missing argument
	exitOwn   = execclient.ExitOwn // sandboxd's own failure, or a request the daemon refuses
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

var commands = map[string]command{
	"serve":      {"build the sandbox and serve it until stopped", runServe},
	"exec":       {"run a command inside the running sandbox", runExec},
	"cp":         {"copy files between the sandbox and here, as docker cp does", runCp},
	"grade":      {"run the task's verifier and print the verdict", runGrade},
	"agent-done": {"mark how the agent's run ended, for records (a harness that drives serve itself)", runAgentDone},
	"keys":       {"print the generated agent SSH private key, or authorize agent keys (--authorize)", runKeys},
	"records":    {"list the recorded sessions as JSON Lines", runRecords},
	"status":     {"print the running daemon's state as JSON; --ready: exit 0 only when a session would be served now", runStatus},
	"stop":       {"stop the running daemon and its sandbox", runOp[daemon.Stopping]("stop")},
	"trial":      {"serve a task on this machine, run an agent, grade, stop", runTrial},
	"doctor":     {"check that serve can build its sandbox here; name what is missing", runDoctor},
	"adapt":      {"turn Harbor task directories into images that serve themselves", runAdapt},
	"version":    {"print the version", runVersion},
}

// summaries are the commands' summaries for their help (commands itself
// cannot be named there: its functions lead to the help).
var summaries = map[string]string{}

func init() {
	for n, c := range commands {
		summaries[n] = c.summary
	}
}

func main() {
	childproc.Maybe()
	daemon.Version = buildVersion().Version
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "sandboxd: name a command")
		usage(os.Stderr)
		os.Exit(exitUsage)
	}
	name := os.Args[1]
	switch name {
	case "-h", "-help", "--help", "help":
		os.Exit(runHelp(os.Args[2:]))
	case "-version", "--version":
		os.Exit(runVersion(context.Background(), os.Args[2:]))
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "sandboxd: unknown command %q\n", name)
		usage(os.Stderr)
		os.Exit(exitUsage)
	}
	if name == "serve" || name == "trial" {
		// Before any string of os.Args is kept: it would point into the
		// area that is blanked.
		if err := join.BlankCommandLine(); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd: %v\n", err)
			os.Exit(exitOwn)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cmd.run(ctx, os.Args[2:])
	stop()
	os.Exit(code)
}

// runHelp is `sandboxd help [COMMAND]`: the commands, or one command's flags.
func runHelp(args []string) int {
	switch {
	case len(args) == 0:
		usage(os.Stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintf(os.Stderr, "sandboxd help: name one command, not %d\n", len(args))
		return exitUsage
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "sandboxd help: unknown command %q\n", args[0])
		usage(os.Stderr)
		return exitUsage
	}
	return cmd.run(context.Background(), []string{"-h"})
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: sandboxd COMMAND [FLAGS]\n\ncommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun sandboxd COMMAND -h (or sandboxd help COMMAND) for a command's flags,\nsandboxd --version for the version.")
}

// harnessDirFlag is shared by every command that talks to the daemon.
func harnessDirFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("SANDBOXD_HARNESS_DIR")
	if def == "" {
		def = config.DefaultHarnessDir
	}
	h := helps[fs]
	h.env = func(name string) string {
		if name == "harness-dir" {
			return "SANDBOXD_HARNESS_DIR"
		}
		return ""
	}
	helps[fs] = h
	return fs.String("harness-dir", def, "sandboxd's own state `DIR`, where the daemon's control socket is")
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "sandboxd: "+format+"\n", args...)
	return exitOwn
}
