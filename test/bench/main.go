// Command bench is `make bench`: it measures sandboxd against what people
// would run instead — bare bwrap, OpenSSH's sshd, a bare nsenter chain,
// docker exec, tinyproxy, squid, a direct connection — on this machine, in
// the same run, alternating each pair (A B A B …) so that both sides see the
// same load, and prints the medians and their ratios against each target.
// With -out it also writes the report (docs/benchmarks.md) and the plot of
// the scaling curves next to it.
//
// Every peer is started by the benchmark on loopback, with a configuration
// of its own in a temporary directory, and stopped again; Debian packages
// that are missing are installed first. Nothing is left behind, also on
// failure or interrupt: every process, container, harness dir and temporary
// directory is registered with the cleanup stack as soon as it exists.
//
//	go run ./test/bench [-quick] [-out docs/benchmarks.md] [-only ready,exec,…]
//
// It must run as root on Debian (bookworm), like the rest of sandboxd's tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The benchmark re-executes itself as the egress client; that role is chosen
// by the first argument, before any flag is parsed.
const clientRole = "__egress-client"

type options struct {
	quick    bool
	out      string
	only     map[string]bool
	sandboxd string // the binary under test
	repo     string // the repository root (for images/base.sh)
	verbose  bool
}

// group is one part of the benchmark; -only selects groups by name.
type group struct {
	name string
	run  func(ctx context.Context, b *bench) error
}

var groups = []group{
	{"ready", benchReady},
	{"exec", benchExecCLI},
	{"ssh", benchSSH},
	{"sftp", benchSFTP},
	{"pty", benchPTY},
	{"memory", benchMemory},
	{"egress", benchEgress},
	{"caught", benchCaught},
	{"dns", benchDNS},
	{"grade", benchGrade},
	{"scaling", benchScaling},
	{"neutral", benchNeutral},
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == clientRole {
		os.Exit(runClient(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	var o options
	only := flag.String("only", "", "comma-separated groups to run (ready, exec, ssh, sftp, pty, memory, egress, dns, grade, scaling, neutral); default all")
	flag.BoolVar(&o.quick, "quick", false, "a reduced run (under two minutes) whose numbers are not judged")
	flag.StringVar(&o.out, "out", "", "write the report here (markdown) and the plot next to it")
	flag.StringVar(&o.sandboxd, "sandboxd", "bin/sandboxd", "the sandboxd binary under test (make build)")
	flag.BoolVar(&o.verbose, "v", false, "log every step")
	flag.Parse()
	if *only != "" {
		o.only = map[string]bool{}
		for _, g := range strings.Split(*only, ",") {
			o.only[strings.TrimSpace(g)] = true
		}
		for g := range o.only {
			if !knownGroup(g) {
				fmt.Fprintf(os.Stderr, "bench: unknown group %q\n", g)
				return 2
			}
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: run as root (sandboxd serve, sshd and docker need it): sudo make bench")
		return 1
	}
	var err error
	if o.sandboxd, err = filepath.Abs(o.sandboxd); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if _, err := os.Stat(o.sandboxd); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v: build it first (make build), or use make bench\n", err)
		return 1
	}
	o.repo, _ = os.Getwd()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newBench(o)
	// Interrupts end the run through the same cleanup as success does.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		b.logf("%v: stopping and cleaning up", s)
		cancel()
		<-sigs
		b.logf("second signal: cleaning up now")
		b.cleanup.Run()
		os.Exit(130)
	}()
	return b.main(ctx)
}

func knownGroup(name string) bool {
	for _, g := range groups {
		if g.name == name {
			return true
		}
	}
	return false
}

// main runs the selected groups and reports; every failure still reports
// what was measured before it.
func (b *bench) main(ctx context.Context) (code int) {
	defer func() {
		if r := recover(); r != nil {
			b.logf("panic: %v", r)
			code = 1
		}
		b.cleanup.Run()
		if n := b.leftovers(); n != "" {
			b.logf("WARNING: left behind after cleanup: %s", n)
			code = 1
		}
	}()
	start := time.Now()
	if err := b.setup(ctx); err != nil {
		b.logf("setup failed: %v", err)
		return 1
	}
	for _, g := range groups {
		if b.opt.only != nil && !b.opt.only[g.name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		b.logf("== %s", g.name)
		t0 := time.Now()
		if err := g.run(ctx, b); err != nil {
			b.failures = append(b.failures, fmt.Sprintf("%s: %v", g.name, err))
			b.logf("%s FAILED: %v", g.name, err)
		}
		b.logf("== %s done in %s", g.name, time.Since(t0).Round(time.Millisecond))
	}
	b.machine.loadAfter = loadavg()
	b.elapsed = time.Since(start)
	fmt.Println()
	fmt.Print(b.textReport())
	if b.opt.out != "" {
		if err := b.writeReport(); err != nil {
			b.logf("write report: %v", err)
			return 1
		}
		b.logf("wrote %s", b.opt.out)
	}
	if ctx.Err() != nil {
		return 130
	}
	if len(b.failures) > 0 {
		return 1
	}
	return 0
}
