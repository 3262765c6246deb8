// Package collect is what follows a grading, as Harbor follows its
// verifier: the task's [[verifier.collect]] hooks, each run as a visitor
// with a timeout of its own, then its artifacts, copied out of the
// sandbox's view into a directory of the harness's.
//
// Everything an artifact names lies in the agent's filesystem, and a root
// agent can plant a symlink, a FIFO or an endless file there, or swap a
// name between two system calls. So a source is opened beneath the
// sandbox's root held open, one component at a time, following no symlink
// (internal/beneath): a symlink is reported and left behind, never read
// through; only regular files and directories are copied, non-blocking and
// within a byte and an entry bound. Nothing is written outside the
// collection's own directory, which lies in the harness dir no agent sees.
package collect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/task"
	"github.com/sandboxd/sandboxd/pkg/visit"
)

// Config is one collection.
type Config struct {
	Target join.Target
	// View is the hooks' view: the harness dir, the hosts file, the masks,
	// the devices, as the healthcheck's (no tests, no verdict).
	View visit.View
	// Base is where collections go, a directory of the harness's; each
	// gets a fresh numbered directory below it.
	Base      string
	Hooks     []Hook
	Artifacts []task.Artifact
	// Root is the sandbox's root as the daemon reaches it
	// (/proc/<holder>/root); sources are resolved beneath it.
	Root string
	// Workdir is what a relative source is relative to.
	Workdir string
	Limits  Limits
	// OpenVisit, if set, opens the network visit of one hook (the
	// verifier's policy, attributed by the visitor's pid): the proxy
	// environment to add, the pid callback and the end of the visit.
	OpenVisit func() (env []string, started func(pid int), done func())
	Log       *slog.Logger
}

// Hook is a collect hook ready to run.
type Hook struct {
	Command string
	Spec    join.Spec // user, environment, workdir; Argv is filled from Command
	Timeout time.Duration
	Err     error // why it cannot run (its user is unknown): reported, not run
}

// Limits bound what a collection copies: the agent decides how much lies
// under an artifact's source.
type Limits struct {
	Bytes   int64 // all files together
	Entries int   // files, directories and skipped entries together
}

// DefaultLimits are the bounds when Config.Limits is zero.
var DefaultLimits = Limits{Bytes: 1 << 30, Entries: 100_000}

// Result is what a collection did, for the verdict.
type Result struct {
	Dir       string     `json:"dir"` // the collection's directory; artifact destinations are relative to it
	Hooks     []HookRun  `json:"hooks,omitempty"`
	Artifacts []Artifact `json:"artifacts,omitempty"`
	Message   string     `json:"message,omitempty"` // why the collection stopped short, if it did
}

// HookRun is one hook's outcome. A hook is best-effort, as in Harbor: its
// failure is reported and the collection goes on.
type HookRun struct {
	Command     string  `json:"command"`
	ExitCode    int     `json:"exit_code"` // -1 when it did not end by itself, or never ran
	TimedOut    bool    `json:"timed_out,omitempty"`
	DurationSec float64 `json:"duration_sec"`
	Output      string  `json:"output_tail"` // the end of what it printed
	OutputFile  string  `json:"output_file"` // all it printed, relative to Result.Dir
	// OutputTruncated says the output file stops at maxHookOutput.
	OutputTruncated bool   `json:"output_truncated,omitempty"`
	Error           string `json:"error,omitempty"`
}

// Artifact is one artifact's outcome.
type Artifact struct {
	Source      string   `json:"source"`
	Destination string   `json:"destination"` // relative to Result.Dir
	Status      string   `json:"status"`      // collected, missing, partial or failed
	Files       int      `json:"files"`
	Bytes       int64    `json:"bytes"`
	Skipped     []string `json:"skipped,omitempty"` // entries left behind and why (symlinks, FIFOs, …), bounded
	Error       string   `json:"error,omitempty"`
}

// The artifact statuses.
const (
	StatusCollected = "collected"
	StatusMissing   = "missing" // the source does not exist
	StatusPartial   = "partial" // copied, but something was left behind or a bound was reached
	StatusFailed    = "failed"  // nothing could be copied
)

// ManifestName is the file in Result.Dir that lists what was collected, as
// Harbor's artifacts directory has one.
const ManifestName = "manifest.json"

// Run runs the hooks, then copies the artifacts, and writes the manifest.
// An error means the collection could not begin at all (no directory of
// its own); every later failure is in the result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	dir, err := freshDir(cfg.Base)
	if err != nil {
		return Result{}, err
	}
	res := Result{Dir: dir}
	for i, h := range cfg.Hooks {
		res.Hooks = append(res.Hooks, runHook(ctx, cfg, dir, i, h, log))
	}
	if len(cfg.Artifacts) > 0 {
		res.Artifacts, res.Message = copyArtifacts(cfg, dir, log)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644); err != nil {
		log.Warn("collect: write the manifest", "err", err)
	}
	return res, nil
}

// freshDir makes the next numbered directory below base: one per grading,
// so that a second grading never mixes its files with the first's.
func freshDir(base string) (string, error) {
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("collect: make %s: %w", base, err)
	}
	for n := 1; ; n++ {
		dir := filepath.Join(base, strconv.Itoa(n))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("collect: make %s: %w", dir, err)
		}
	}
}

// runHook runs one hook as a visitor, its output into a file of the
// collection's (made by us, O_EXCL, so nothing of the agent's is written).
func runHook(ctx context.Context, cfg Config, dir string, i int, h Hook, log *slog.Logger) HookRun {
	name := fmt.Sprintf("collect-%d.txt", i+1)
	run := HookRun{Command: h.Command, ExitCode: -1, OutputFile: name}
	if h.Err != nil {
		run.Error, run.OutputFile = h.Err.Error(), ""
		return run
	}
	out, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer out.Close()
	spec := h.Spec
	spec.Argv = []string{"/bin/sh", "-c", h.Command}
	view := cfg.View
	if cfg.OpenVisit != nil {
		env, started, done := cfg.OpenVisit()
		defer done()
		spec.Env = append(append([]string{}, env...), spec.Env...)
		view.Started = started
	}
	// The hook prints what it likes (the agent's files, say): through a
	// pipe, only maxHookOutput of it reaches the harness dir's disk.
	pw, copied, err := boundedOutput(out, maxHookOutput)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	start := time.Now()
	o, err := visit.Run(ctx, cfg.Target, view, spec, pw, h.Timeout)
	pw.Close()
	run.DurationSec = time.Since(start).Seconds()
	run.OutputTruncated = copied()
	run.Output = visit.Tail(out)
	switch {
	case err != nil:
		run.Error = err.Error()
	case o.Interrupted != nil:
		run.Error = o.Interrupted.Error()
	case o.TimedOut:
		run.TimedOut = true
		run.Error = fmt.Sprintf("killed at its timeout (%s)", h.Timeout)
	case o.Report == nil:
		run.Error = fmt.Sprintf("the visitor ended without a report (%v): %s", o.WaitErr, o.Stderr)
	case o.Report.Setup != "":
		run.Error = o.Report.Setup
	case o.Report.Start != "":
		run.Error = o.Report.Start
	default:
		run.ExitCode = o.Report.Code
	}
	if run.Error != "" || run.ExitCode != 0 {
		log.Warn("collect hook failed; collecting on", "command", h.Command, "exit", run.ExitCode, "err", run.Error)
	}
	return run
}

// destination is where an artifact goes below the collection's directory:
// its own destination, else its source's path without the leading "/", as
// a mirror of where it lay.
func destination(a task.Artifact, workdir string) (src, dst string) {
	src = a.Source
	if !path.IsAbs(src) {
		src = path.Join(workdir, src)
	}
	src = path.Clean(src)
	dst = strings.TrimSuffix(a.Destination, "/")
	if dst == "" {
		dst = strings.TrimPrefix(src, "/")
	}
	if dst == "" {
		dst = "root"
	}
	return src, path.Clean(dst)
}

// maxHookOutput bounds the output a hook keeps in the harness dir.
const maxHookOutput = 16 << 20

// boundedOutput is a pipe for a visitor's output whose first max bytes go
// into f and the rest nowhere. copied waits for the copy (every writer gone:
// the visitor's pid namespace ends with it) and says whether bytes were
// dropped; the caller closes w once the visitor has ended.
func boundedOutput(f *os.File, max int64) (w *os.File, copied func() (truncated bool), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("collect: a pipe for a hook's output: %w", err)
	}
	done := make(chan bool, 1)
	go func() {
		defer r.Close()
		n, _ := io.CopyN(f, r, max)
		dropped := int64(0)
		if n == max {
			dropped, _ = io.Copy(io.Discard, r)
		}
		done <- dropped > 0
	}()
	return w, func() bool {
		select {
		case t := <-done:
			return t
		case <-time.After(5 * time.Second):
			// A writer outlived the visit: what it writes from now on
			// is not kept.
			r.Close()
			return true
		}
	}, nil
}
