// Package engine drives the container engine adapt builds with: docker, or
// podman where that is what is installed, through its command-line client
// (no SDK dependency, and every step can be repeated by hand from the
// progress it prints).
package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Engine is the container engine as adapt uses it. CLI drives docker or
// podman; tests substitute a fake.
type Engine interface {
	// Name says which engine and version, for the manifest and messages.
	Name() string
	// Inspect reads an image's config; ErrNoImage when the engine lacks it.
	Inspect(ctx context.Context, ref string) (*Image, error)
	// History lists an image's history, newest first, as `docker history` does.
	History(ctx context.Context, ref string) ([]HistoryEntry, error)
	// Pull fetches ref, streaming progress to log.
	Pull(ctx context.Context, ref string, log io.Writer) error
	// Build builds a Dockerfile context and returns the image ID. A failure is a *BuildError.
	Build(ctx context.Context, b BuildSpec, log io.Writer) (string, error)
	// Run runs a shell script in a throwaway container of image as uid 0 with
	// no network, and returns its stdout and exit status.
	Run(ctx context.Context, image, script string) (stdout string, code int, err error)
	// Load loads a docker-archive file.
	Load(ctx context.Context, archive string, log io.Writer) error
	// Push pushes ref, streaming progress to log.
	Push(ctx context.Context, ref string, log io.Writer) error
	// LoadsPartialArchives says whether Load accepts an archive that names
	// layers the engine already has without carrying them (Docker's classic
	// image store does). Otherwise adapt builds a Dockerfile instead.
	LoadsPartialArchives() bool
}

// ErrNoImage is Inspect's answer for an image the engine does not have.
var ErrNoImage = errors.New("no such image")

// ErrNoEngine marks a missing or silent container engine.
var ErrNoEngine = errors.New("no container engine")

// Image is an image's config as `docker image inspect` reports it.
type Image struct {
	ID           string
	RepoTags     []string
	RepoDigests  []string
	Created      string
	Architecture string
	OS           string
	Variant      string
	Size         int64
	Config       ImageConfig
	RawConfig    map[string]any // Config as written, to carry every field into a derived image
	Layers       []string       // RootFS diff IDs, bottom first
}

// ImageConfig is the part of an image's config adapt reads.
type ImageConfig struct {
	User       string
	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	Labels     map[string]string
}

// HistoryEntry is one line of `docker history`.
type HistoryEntry struct {
	Created   string
	CreatedBy string
	Comment   string
	Size      int64
}

// BuildSpec is one `docker build`.
type BuildSpec struct {
	What       string // what is being built, for messages ("environment/Dockerfile of group x")
	Context    string
	Dockerfile string // relative to Context
	Args       map[string]string
	Tags       []string
	Timeout    time.Duration // 0 = none; the build_timeout_sec of the task
}

// BuildError is a failed build with the end of its output.
type BuildError struct {
	What     string
	Tail     []string // the last lines of output (at most tailLines)
	TimedOut time.Duration
	Err      error
}

const tailLines = 40

func (e *BuildError) Error() string {
	var b strings.Builder
	if e.TimedOut > 0 {
		fmt.Fprintf(&b, "build of %s exceeded build_timeout_sec (%s): raise [environment].build_timeout_sec or make the build faster", e.What, e.TimedOut)
	} else {
		fmt.Fprintf(&b, "build of %s failed: %v", e.What, e.Err)
	}
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "; its last %d lines:\n    %s", len(e.Tail), strings.Join(e.Tail, "\n    "))
	}
	return b.String()
}

func (e *BuildError) Unwrap() error { return e.Err }

// CLI is a container engine reached through its command-line client.
type CLI struct {
	Path    string // the client binary
	Kind    string // "docker" or "podman"
	Version string // the server's version
}

// Detect finds the engine: $SANDBOXD_ENGINE (a client name or path), else
// docker, else podman; and checks that it answers.
func Detect(ctx context.Context) (*CLI, error) {
	cands := []string{"docker", "podman"}
	if e := os.Getenv("SANDBOXD_ENGINE"); e != "" {
		cands = []string{e}
	}
	var found []string
	for _, c := range cands {
		path, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		kind := "docker"
		if strings.Contains(filepath.Base(path), "podman") {
			kind = "podman"
		}
		cli := &CLI{Path: path, Kind: kind}
		// The server's version: asking for it is what proves the engine answers.
		format := "{{.Server.Version}}"
		if kind == "podman" {
			format = "{{.Client.Version}}" // podman has a server only when remote
		}
		vctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := cli.output(vctx, "version", "--format", format)
		cancel()
		if err != nil {
			found = append(found, fmt.Sprintf("%s (%v)", path, err))
			continue
		}
		cli.Version = strings.TrimSpace(out)
		return cli, nil
	}
	if len(found) > 0 {
		return nil, fmt.Errorf("%w: the engine does not answer: %s; start it (systemctl start docker), or write build contexts with --out DIR and build them elsewhere", ErrNoEngine, strings.Join(found, "; "))
	}
	return nil, fmt.Errorf("%w: neither %s is installed; install Docker or podman, or write build contexts with --out DIR and build them elsewhere", ErrNoEngine, strings.Join(cands, " nor "))
}

// Name says "docker 20.10.24".
func (c *CLI) Name() string { return c.Kind + " " + c.Version }

// LoadsPartialArchives is true for Docker: its classic image store looks a
// layer up by chain ID before opening the layer's file. Podman's is untested
// here, so podman builds.
func (c *CLI) LoadsPartialArchives() bool { return c.Kind == "docker" }

// Inspect runs `image inspect`.
func (c *CLI) Inspect(ctx context.Context, ref string) (*Image, error) {
	out, err := c.output(ctx, "image", "inspect", ref)
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "no such image") || strings.Contains(err.Error(), "image not known") {
			return nil, fmt.Errorf("inspect %s: %w", ref, ErrNoImage)
		}
		return nil, fmt.Errorf("inspect %s: %w", ref, err)
	}
	return parseInspect(ref, []byte(out))
}

func parseInspect(ref string, out []byte) (*Image, error) {
	var raw []struct {
		ID           string `json:"Id"`
		RepoTags     []string
		RepoDigests  []string
		Created      string
		Architecture string
		Os           string
		Variant      string
		Size         int64
		Config       json.RawMessage
		RootFS       struct{ Layers []string }
	}
	if err := json.Unmarshal(out, &raw); err != nil || len(raw) != 1 {
		return nil, fmt.Errorf("inspect %s: unexpected output (%v): %.200s", ref, err, out)
	}
	r := raw[0]
	img := &Image{ID: r.ID, RepoTags: r.RepoTags, RepoDigests: r.RepoDigests, Created: r.Created,
		Architecture: r.Architecture, OS: r.Os, Variant: r.Variant, Size: r.Size, Layers: r.RootFS.Layers}
	if len(r.Config) > 0 && string(r.Config) != "null" {
		if err := json.Unmarshal(r.Config, &img.Config); err != nil {
			return nil, fmt.Errorf("inspect %s: config: %w", ref, err)
		}
		if err := json.Unmarshal(r.Config, &img.RawConfig); err != nil {
			return nil, fmt.Errorf("inspect %s: config: %w", ref, err)
		}
	}
	if img.RawConfig == nil {
		img.RawConfig = map[string]any{}
	}
	return img, nil
}

// History runs `history` with exact sizes and full commands.
func (c *CLI) History(ctx context.Context, ref string) ([]HistoryEntry, error) {
	out, err := c.output(ctx, "history", "--no-trunc", "--human=false", "--format", "{{json .}}", ref)
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", ref, err)
	}
	var hs []HistoryEntry
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r struct{ CreatedAt, CreatedBy, Comment, Size string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("history of %s: %w", ref, err)
		}
		size, _ := strconv.ParseInt(r.Size, 10, 64)
		hs = append(hs, HistoryEntry{Created: r.CreatedAt, CreatedBy: r.CreatedBy, Comment: r.Comment, Size: size})
	}
	return hs, nil
}

// Pull runs `pull`.
func (c *CLI) Pull(ctx context.Context, ref string, log io.Writer) error {
	if _, err := c.stream(ctx, log, "pull", ref); err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}

// Push runs `push`.
func (c *CLI) Push(ctx context.Context, ref string, log io.Writer) error {
	if _, err := c.stream(ctx, log, "push", ref); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// Load runs `load -i`.
func (c *CLI) Load(ctx context.Context, archive string, log io.Writer) error {
	if _, err := c.stream(ctx, log, "load", "-i", archive); err != nil {
		return fmt.Errorf("load %s: %w", archive, err)
	}
	return nil
}

// Build runs `build` with an iidfile, streaming its output to log and keeping
// the last lines for the error.
func (c *CLI) Build(ctx context.Context, b BuildSpec, log io.Writer) (string, error) {
	iid, err := os.CreateTemp("", "sandboxd-adapt-iid-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", b.What, err)
	}
	iid.Close()
	defer os.Remove(iid.Name())
	// --force-rm: the classic builder keeps the container of a failed step
	// otherwise, and adapt must not leave containers behind.
	args := []string{"build", "--force-rm", "--iidfile", iid.Name(), "-f", filepath.Join(b.Context, b.Dockerfile)}
	for _, k := range slices.Sorted(maps.Keys(b.Args)) {
		args = append(args, "--build-arg", k+"="+b.Args[k])
	}
	for _, t := range b.Tags {
		args = append(args, "-t", t)
	}
	args = append(args, b.Context)
	bctx := ctx
	if b.Timeout > 0 {
		var cancel context.CancelFunc
		bctx, cancel = context.WithTimeout(ctx, b.Timeout)
		defer cancel()
	}
	tail, err := c.stream(bctx, log, args...)
	if err != nil {
		be := &BuildError{What: b.What, Tail: tail, Err: err}
		if b.Timeout > 0 && errors.Is(bctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			be.TimedOut = b.Timeout
		}
		return "", be
	}
	id, err := os.ReadFile(iid.Name())
	if err != nil || len(bytes.TrimSpace(id)) == 0 {
		return "", &BuildError{What: b.What, Tail: tail, Err: fmt.Errorf("the engine wrote no image ID (%v)", err)}
	}
	return string(bytes.TrimSpace(id)), nil
}

// Run runs `run --rm` of a shell script with no network as uid 0.
func (c *CLI) Run(ctx context.Context, image, script string) (string, int, error) {
	cmd := c.command(ctx, "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "/bin/sh", image, "-c", script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.String() + stderr.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return "", -1, fmt.Errorf("run %s: %w", image, err)
	}
	return stdout.String(), 0, nil
}

func (c *CLI) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Path, args...)
	// The client cancels the request (and the daemon the build) on SIGINT;
	// SIGKILL would leave the build running in the daemon.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	return cmd
}

// output runs the client and returns stdout; an error carries stderr.
func (c *CLI) output(ctx context.Context, args ...string) (string, error) {
	cmd := c.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return stdout.String(), fmt.Errorf("%s %s: %s", filepath.Base(c.Path), args[0], msg)
	}
	return stdout.String(), nil
}

// stream runs the client with stdout and stderr going line by line to log,
// and returns the last tailLines lines.
func (c *CLI) stream(ctx context.Context, log io.Writer, args ...string) ([]string, error) {
	cmd := c.command(ctx, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if log != nil {
				fmt.Fprintln(log, line)
			}
			// The tail goes into an error message: no colour codes, and
			// not the client's notice about its own builder.
			line = ansiEscape().ReplaceAllString(line, "")
			if legacyNotice().MatchString(line) {
				continue
			}
			if len(tail) == tailLines {
				tail = tail[1:]
			}
			tail = append(tail, line)
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		return tail, fmt.Errorf("%s %s: %w", filepath.Base(c.Path), args[0], err)
	}
	return tail, nil
}

// The patterns are compiled on first use, not at init: every start of the
// binary runs every package's init, and most of them never builds an image.
var (
	ansiEscape   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`) })
	legacyNotice = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*(DEPRECATED: The legacy builder is deprecated|Install the buildx component to build images|https://docs\.docker\.com/go/buildx/|$)`)
	})
)
