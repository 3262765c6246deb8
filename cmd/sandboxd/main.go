// Command sandboxd serves one bubblewrap sandbox for an agent-benchmark
// rollout, lets agents in, and grades the result. Each subcommand is one call
// into the packages that do the work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// Exit codes shared by every subcommand, as docker run and timeout(1) use them.
const (
	exitUsage   = 2
	exitTimeout = 124
	exitOwn     = 125 // sandboxd's own failure
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

var commands = map[string]command{
	"serve":   {"build the sandbox and serve it until stopped", runServe},
	"exec":    {"run a command inside the running sandbox", runExec},
	"grade":   {"run the task's verifier and print the verdict", runGrade},
	"keys":    {"print the generated agent SSH private key", runKeys},
	"records": {"list the recorded sessions as JSON", runRecords},
	"status":  {"print the running daemon's state as JSON", runStatus},
	"stop":    {"stop the running daemon and its sandbox", runStop},
	"trial":   {"serve a task on this machine, run an agent, grade, stop", runTrial},
	"doctor":  {"check that serve can build its sandbox here; name what is missing", runDoctor},
	"adapt":   {"turn Harbor task directories into images that serve themselves", runAdapt},
	"version": {"print the version", runVersion},
}

func main() {
	childproc.Maybe()
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitUsage)
	}
	if os.Args[1] == "serve" || os.Args[1] == "trial" {
		// Before any string of os.Args is kept: it would point into the
		// area that is blanked.
		if err := join.BlankCommandLine(); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd: %v\n", err)
			os.Exit(125)
		}
	}
	name := os.Args[1]
	cmd, ok := commands[name]
	if !ok {
		if name == "-h" || name == "--help" || name == "help" {
			usage()
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "sandboxd: unknown command %q\n", name)
		usage()
		os.Exit(exitUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cmd.run(ctx, os.Args[2:])
	stop()
	os.Exit(code)
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "usage: sandboxd COMMAND [FLAGS]\n\ncommands:")
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
}

// flags makes a FlagSet whose errors say which command they belong to.
func flags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxd "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: sandboxd %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// harnessDirFlag is shared by every command that talks to the daemon.
func harnessDirFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("SANDBOXD_HARNESS_DIR")
	if def == "" {
		def = daemon.DefaultHarnessDir
	}
	return fs.String("harness-dir", def, "sandboxd's own state (env SANDBOXD_HARNESS_DIR)")
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "sandboxd: "+format+"\n", args...)
	return exitOwn
}

func parse(fs *flag.FlagSet, args []string) (ok bool, code int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, 0
		}
		return false, exitUsage
	}
	return true, 0
}

func runVersion(_ context.Context, _ []string) int {
	fmt.Println("sandboxd", daemon.Version)
	return 0
}
