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
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/imagefile"
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
	v, ok := versionInBinary(full)
	if !ok {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, full, "--version")
		cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, []string{"PATH=" + childproc.DefaultPath}
		if err := cmd.Run(); err != nil {
			return "", Version{}, fmt.Errorf("run %s --version: %w: %s", full, err, strings.TrimSpace(out.String()))
		}
		if v, err = ParseVersion(out.String()); err != nil {
			return "", Version{}, err
		}
	}
	if v.Less(Minimum) {
		return "", Version{}, fmt.Errorf("%w: %s is %s, sandboxd needs %s or newer; install a newer bubblewrap", ErrTooOld, full, v, Minimum)
	}
	return full, v, nil
}

// maxBinary bounds what versionInBinary reads: bwrap is some 70 KB.
const maxBinary = 4 << 20

// versionInBinary reads, from the binary at path, the version that
// `bwrap --version` prints. What it prints is a string constant of the
// binary (PACKAGE_STRING, "bubblewrap X.Y.Z"), so reading it costs a read
// of some 70 KB, where running bwrap cost about 5 ms of serve's start here.
// It answers only for an ELF file of at most maxBinary bytes that holds
// exactly one such string; otherwise the caller runs bwrap --version.
func versionInBinary(path string) (Version, bool) {
	// A file that is not regular, or too large, is left to the run, which
	// fails with what it says.
	data, err := imagefile.ReadFile(path, maxBinary)
	if err != nil || !bytes.HasPrefix(data, []byte("\x7fELF")) {
		return Version{}, false
	}
	var found []Version
	for rest := data; ; {
		i := bytes.Index(rest, packageString)
		if i < 0 {
			break
		}
		rest = rest[i+len(packageString):]
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			break
		}
		if w, ok := dottedVersion(rest[:end]); ok && !slices.Contains(found, w) {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		return Version{}, false
	}
	return found[0], true
}

// packageString begins PACKAGE_STRING as a C string constant of its own.
var packageString = []byte("\x00bubblewrap ")

// dottedVersion reads exactly X.Y.Z, digits and two dots.
func dottedVersion(b []byte) (Version, bool) {
	parts := bytes.Split(b, []byte("."))
	if len(parts) != 3 {
		return Version{}, false
	}
	var n [3]int
	for i, p := range parts {
		if len(p) == 0 || len(p) > 4 {
			return Version{}, false
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return Version{}, false
			}
			n[i] = n[i]*10 + int(c-'0')
		}
	}
	return Version{n[0], n[1], n[2]}, true
}
