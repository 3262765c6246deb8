// Package bwrap builds the one bubblewrap sandbox of a rollout: it probes the
// bwrap it finds, emits only options that bwrap has, spawns the holder, maps
// ids into it and waits until it is ready to be joined.
package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/childproc"
)

// Version is a bubblewrap release.
type Version struct{ Major, Minor, Patch int }

// Minimum is the oldest bwrap we drive: Debian bullseye ships 0.4.1.
var Minimum = Version{0, 4, 0}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less orders releases.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// ErrNotFound means there is no bwrap to run.
var ErrNotFound = errors.New("bubblewrap not found")

// ErrTooOld means the bwrap found predates Minimum.
var ErrTooOld = errors.New("bubblewrap too old")

// ParseVersion reads the output of `bwrap --version` ("bubblewrap 0.8.0").
func ParseVersion(out string) (Version, error) {
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "bubblewrap" {
		return Version{}, fmt.Errorf("parse bwrap version %q: want \"bubblewrap X.Y.Z\"", strings.TrimSpace(out))
	}
	parts := strings.SplitN(f[1], ".", 3)
	var n [3]int
	for i, p := range parts {
		// Distribution suffixes ("0.8.0-2ubuntu1") end at the first non-digit.
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		v, err := strconv.Atoi(p[:end])
		if err != nil {
			return Version{}, fmt.Errorf("parse bwrap version %q: %w", f[1], err)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// Probing is a Probe begun ahead of Start (ProbeAhead), so that the run of
// bwrap --version overlaps its caller's other steps.
type Probing struct {
	done    chan struct{}
	path    string
	version Version
	err     error
}

// ProbeAhead begins Probe(ctx, path) in the background.
func ProbeAhead(ctx context.Context, path string) *Probing {
	p := &Probing{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.path, p.version, p.err = Probe(ctx, path)
	}()
	return p
}

// Wait returns what Probe returned.
func (p *Probing) Wait() (string, Version, error) {
	<-p.done
	return p.path, p.version, p.err
}

// Probe finds bwrap at path (or on PATH when path is a bare name; "" is
// bwrap) and reads its version; a bwrap older than Minimum is refused with
// what to do.
func Probe(ctx context.Context, path string) (string, Version, error) {
	if path == "" {
		path = "bwrap"
	}
	full, err := exec.LookPath(path)
	if err != nil {
		return "", Version{}, fmt.Errorf("%w: %q is not on PATH; install the bubblewrap package (apt-get install bubblewrap, apk add bubblewrap, dnf install bubblewrap)", ErrNotFound, path)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, full, "--version")
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, []string{"PATH=" + childproc.DefaultPath}
	if err := cmd.Run(); err != nil {
		return "", Version{}, fmt.Errorf("run %s --version: %w: %s", full, err, strings.TrimSpace(out.String()))
	}
	v, err := ParseVersion(out.String())
	if err != nil {
		return "", Version{}, err
	}
	if v.Less(Minimum) {
		return "", Version{}, fmt.Errorf("%w: %s is %s, sandboxd needs %s or newer; install a newer bubblewrap", ErrTooOld, full, v, Minimum)
	}
	return full, v, nil
}
