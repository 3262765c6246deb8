package tarcopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/tail"
)

// Prefix marks the side of a cp that is inside the sandbox.
const Prefix = "sandbox:"

// Copy is one `sandboxd cp` as its command line gives it.
type Copy struct {
	Src, Dst string // exactly one starts with Prefix; the other may be "-"
	User     string // the owner of what is copied in (default: the agent user)
	Archive  bool   // keep the archive's ids (and setuid/setgid bits)
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer // what the copy skipped
}

// ErrUsage is a cp command line that names no copy.
var ErrUsage = errors.New("usage")

// Run carries out c through the daemon behind client: the local side here,
// the sandbox's side in the daemon's role (Serve). A local destination is
// unpacked as Extract does outside the sandbox: beneath it, following no
// symlink. An error that is not ErrUsage or a *control.Failure is the
// copy's own failure.
func Run(ctx context.Context, client control.Client, c Copy) error {
	in, out := strings.HasPrefix(c.Dst, Prefix), strings.HasPrefix(c.Src, Prefix)
	if in == out {
		return fmt.Errorf("%w: exactly one of SRC and DST is %sPATH, the other a local path or -", ErrUsage, Prefix)
	}
	req := control.Request{Op: "cp", User: c.User, Copy: &control.Copy{Out: out, Archive: c.Archive}}
	if out && c.User != "" {
		return fmt.Errorf("%w: -u names the owner of what is copied into the sandbox; what is copied out is the caller's (or, with -a, the archive's ids)", ErrUsage)
	}
	msg := tail.New(4 << 10)
	streams := control.Streams{Stdout: io.Discard, Stderr: msg, AbortOnStdinError: true}
	var local <-chan error
	if in {
		req.Copy.Path = strings.TrimPrefix(c.Dst, Prefix)
		if c.Src == "-" {
			req.Copy.Raw = true
			streams.Stdin = c.Stdin
		} else {
			if _, err := os.Lstat(strings.TrimSuffix(c.Src, "/.")); err != nil {
				return err
			}
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				err := Pack(pw, c.Src, false, c.Stderr)
				pw.CloseWithError(err)
				done <- err
			}()
			streams.Stdin, local = pr, done
		}
	} else {
		req.Copy.Path = strings.TrimPrefix(c.Src, Prefix)
		if c.Dst == "-" {
			streams.Stdout = c.Stdout
		} else {
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			o := Options{UID: os.Getuid(), GID: os.Getgid(), Archive: c.Archive}
			go func() {
				err := Extract(pr, c.Dst, false, false, o)
				if err == nil {
					// What follows the archive's end, if anything, is read
					// and dropped, so that the stream can finish.
					_, err = io.Copy(io.Discard, pr)
				}
				pr.CloseWithError(fmt.Errorf("unpack: %w", err))
				done <- err
			}()
			streams.Stdout, local = pw, done
		}
	}
	exit, err := client.Exec(ctx, req, streams)
	// The local side's pipe ends here either way: a packer still writing,
	// or an unpacker still reading, stops.
	switch p := streams.Stdin.(type) {
	case *io.PipeReader:
		p.Close()
	}
	if p, ok := streams.Stdout.(*io.PipeWriter); ok {
		p.Close()
	}
	var localErr error
	if local != nil {
		localErr = <-local
	}
	var f *control.Failure
	switch {
	case errors.As(err, &f):
		return f
	case err == nil && exit.Code != 0:
		why := strings.TrimSpace(msg.String())
		if why == "" {
			why = fmt.Sprintf("the sandbox's side ended with %d%s", exit.Code, signalSuffix(exit.Signal))
		}
		return errors.New(why)
	case localErr != nil:
		return localErr
	}
	return err
}

func signalSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return " (SIG" + sig + ")"
}
