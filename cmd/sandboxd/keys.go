package main

import (
	"context"
	"io"
	"os"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
)

// maxAuthorize bounds what keys --authorize - reads: many key lines, never
// an unbounded stream.
const maxAuthorize = 1 << 20

// runKeys prints the generated agent key, or with --authorize adds agent
// keys to the running serve (a warm sandbox's trial key, after the claim;
// docs/kubernetes.md).
func runKeys(ctx context.Context, args []string) int {
	fs := flags("keys", "[--authorize KEYS|-] [--harness-dir DIR]")
	harness := harnessDirFlag(fs)
	authorize := fs.String("authorize", "", "add agent public `KEYS` (authorized_keys lines; - reads them from stdin) to the running serve, and print their fingerprints")
	if ok, code := noArgs(fs, args); !ok {
		return code
	}
	req := control.Request{Op: "keys", Authorize: *authorize}
	if *authorize == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxAuthorize+1))
		if err != nil {
			return fail("keys: read the keys from stdin: %v", err)
		}
		if len(b) > maxAuthorize {
			return fail("keys: more than %d bytes of keys on stdin", maxAuthorize)
		}
		req.Authorize = string(b)
	}
	var res daemon.Keys
	if err := (control.Client{HarnessDir: *harness}).Call(ctx, req, &res); err != nil {
		return fail("keys: %v", err)
	}
	return res.Print(os.Stdout, os.Stderr)
}
