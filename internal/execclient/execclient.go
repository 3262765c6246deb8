// Package execclient is `sandboxd exec`'s client: it sends the daemon an
// exec request and relays the command's streams, signals and exit status.
//
// Its common case runs from this package's init (quick.go), before most of
// the binary's packages are initialized. One binary runs every package
// init of everything it links, the daemon's libraries among them (SSH,
// YAML, TOML, nftables), and that is about a millisecond of every start;
// the bare `nsenter → setpriv → env` chain that the benchmark holds exec
// to pays none of it. So, like package wire, this package must not import
// reflect, directly or not: Go initializes packages in import-path order
// as soon as their imports are, and one that waits for reflect waits for
// some fifty others (TestQuickExecRunsBeforeTheDaemonsLibraries).
package execclient

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/control/wire"
)

// Request is an exec request, as control.Request carries it.
type Request struct {
	Argv    []string
	User    string
	Dir     string
	Env     []string
	TTY     bool
	Stdin   bool
	Term    string
	Cols    int
	Rows    int
	Timeout string // a Go duration; "" is none
}

// JSON is the request's document, as encoding/json writes a control.Request
// with these fields (TestRequestJSONIsControlsRequest).
func (r Request) JSON() []byte {
	var o wire.Object
	o.String("op", "exec")
	if len(r.Argv) > 0 {
		o.Strings("argv", r.Argv)
	}
	if r.User != "" {
		o.String("user", r.User)
	}
	if r.Dir != "" {
		o.String("dir", r.Dir)
	}
	if len(r.Env) > 0 {
		o.Strings("env", r.Env)
	}
	if r.TTY {
		o.Bool("tty", true)
	}
	if r.Stdin {
		o.Bool("stdin", true)
	}
	if r.Term != "" {
		o.String("term", r.Term)
	}
	if r.Cols != 0 {
		o.Int("cols", r.Cols)
	}
	if r.Rows != 0 {
		o.Int("rows", r.Rows)
	}
	if r.Timeout != "" {
		o.String("timeout", r.Timeout)
	}
	return o.Bytes()
}

// Exit codes; cmd/sandboxd's are these.
const (
	ExitTimeout = 124 // --timeout elapsed
	ExitOwn     = 125 // sandboxd's own failure, or a request the daemon refuses
)

// Run runs req in the sandbox of the daemon behind harnessDir, with the
// process's stdout and stderr, its stdin when req.Stdin, and resize as the
// terminal's new sizes (nil without one); it forwards SIGHUP, SIGUSR1 and
// SIGUSR2 to the command, and SIGTERM, SIGINT or the end of ctx end the
// command's whole tree. It returns
// the exit code `sandboxd exec` ends with, having said on stderr why when
// it is not the command's own.
func Run(ctx context.Context, harnessDir string, req Request, resize <-chan wire.Resize) int {
	streams := wire.Streams{Stdout: os.Stdout, Stderr: os.Stderr, Resize: resize}
	if req.Stdin {
		streams.Stdin = os.Stdin
	}
	// The first signal.Notify starts the runtime's signal handling (a
	// goroutine, and one locked to a thread of its own), about as long as
	// the rest of a short exec's client side: it is done while the request
	// is on its way. A signal that comes before it ends this process, and
	// so the command's tree, as SIGTERM and SIGINT do after it; SIGHUP,
	// SIGUSR1 and SIGUSR2 are passed on from then on. One channel for
	// all: each Notify is more of that work.
	sigs := make(chan os.Signal, 4)
	go signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	streams.Signal = sigs
	exit, err := exec(ctx, harnessDir, req, streams)
	if err != nil {
		var f *wire.Failure
		if errors.As(err, &f) {
			say("sandboxd: exec: " + f.Message)
			return f.Code
		}
		if errors.Is(err, context.Canceled) {
			// The caller's SIGTERM or SIGINT, taken before this Run's own.
			say("sandboxd: exec: ended by a signal: the command's whole tree was killed")
			return ExitOwn
		}
		say("sandboxd: exec: " + err.Error())
		return ExitOwn
	}
	if exit.TimedOut {
		say("sandboxd: exec: timed out after " + req.Timeout + "; the command's whole tree was killed")
		return ExitTimeout
	}
	return exit.Code
}

func exec(ctx context.Context, harnessDir string, req Request, s wire.Streams) (wire.Exit, error) {
	conn, c, err := wire.Dial(ctx, harnessDir, req.JSON(), s.Signal)
	if err != nil {
		return wire.Exit{}, err
	}
	defer c.Close()
	return wire.Session(ctx, conn, c, s)
}

func say(line string) { os.Stderr.WriteString(line + "\n") }
