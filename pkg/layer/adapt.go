package layer

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/pkg/layer/engine"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Options are adapt's flags and what the command line knows.
type Options struct {
	Prefix     string        // image repository prefix (--tag); default DefaultPrefix
	Out        string        // --out: write build contexts and build.sh here, build nothing
	ComposeDir string        // where compose files for compose tasks go when building; default "sandboxd-compose"
	Push       bool          // push every tag made
	Binary     string        // the static sandboxd binary to bake in
	Version    string        // sandboxd's version, for labels
	Seccomp    string        // images/seccomp.json, copied next to emitted compose files; "" = unknown
	Engine     engine.Engine // nil = Detect
	Log        io.Writer     // progress; default os.Stderr
	Jobs       int           // groups built at once; default min(2, CPUs)
	// HarborTools is whether the tools Harbor's agents expect (python3,
	// pip, git, curl) are baked in where missing; default HarborToolsBake.
	HarborTools HarborTools
}

// RefusedError is an image adapt will not extend, and why.
type RefusedError struct {
	Image  string // what the base is ("environment/Dockerfile", "docker_image x")
	Reason string
}

// ErrRefused matches every RefusedError.
var ErrRefused = errors.New("refused")

func (e *RefusedError) Error() string { return "base " + e.Image + ": " + e.Reason }

// Unwrap lets errors.Is match ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Adapt turns task directories into images (or, with Out, into build
// contexts). The manifest lists every task given: adapted, or in Errors with
// the reason; a bad task never stops the others. The error is for what stops
// the whole run: a bad prefix, an unusable binary, no engine.
func Adapt(ctx context.Context, dirs []string, o Options) (*Manifest, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.ComposeDir == "" {
		o.ComposeDir = "sandboxd-compose"
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Jobs <= 0 {
		o.Jobs = min(2, runtime.NumCPU())
	}
	m := &Manifest{Version: o.Version, Out: o.Out, Tasks: []TaskEntry{}, Groups: []GroupEntry{}, Errors: []ErrorEntry{}}
	if err := CheckPrefix(o.Prefix); err != nil {
		return m, err
	}
	plan := MakePlan(ExpandDirs(dirs), o.Prefix)
	for _, f := range plan.Failures {
		m.fail(f.Dir, f.Name, f.Err)
	}
	if len(plan.Groups) == 0 {
		m.sortEntries()
		return m, nil
	}
	arch, err := CheckBinary(o.Binary)
	if err != nil {
		return m, err
	}
	b := &builder{o: o, arch: arch, mu: &sync.Mutex{}}
	if o.Out != "" {
		err := b.writeOut(plan, m)
		m.sortEntries()
		return m, err
	}
	if o.Engine == nil {
		cli, err := engine.Detect(ctx)
		if err != nil {
			for _, g := range plan.Groups {
				for _, it := range g.Tasks {
					m.fail(it.Dir, it.Task.Name, err)
				}
			}
			m.sortEntries()
			return m, err
		}
		o.Engine = cli
		b.o.Engine = cli
	}
	m.Engine = o.Engine.Name()
	b.say("", "%d task(s) in %d group(s), engine %s", countTasks(plan), len(plan.Groups), m.Engine)

	var wg sync.WaitGroup
	sem := make(chan struct{}, o.Jobs)
	var mmu sync.Mutex
	for _, g := range plan.Groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			ge, tasks, err := b.group(ctx, g)
			ge.Seconds = time.Since(start).Seconds()
			mmu.Lock()
			defer mmu.Unlock()
			if err != nil {
				ge.Error = err.Error()
				for _, it := range g.Tasks {
					m.fail(it.Dir, it.Task.Name, fmt.Errorf("group %s: %w", g.Name, err))
				}
				b.say(g.Name, "FAILED: %v", err)
			} else {
				m.Tasks = append(m.Tasks, tasks...)
				b.say(g.Name, "done in %.1fs: %s", ge.Seconds, g.Image)
			}
			m.Groups = append(m.Groups, ge)
		}()
	}
	wg.Wait()
	m.sortEntries()
	return m, ctx.Err()
}

func countTasks(p *Plan) int {
	n := 0
	for _, g := range p.Groups {
		n += len(g.Tasks)
	}
	return n
}

// CheckBinary makes sure the binary adapt bakes in can run in any Linux
// image: statically linked (an image may lack the loader and libc it would
// name), and returns its GOARCH name to compare with the base's.
func CheckBinary(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("no sandboxd binary to bake in: build one with make build")
	}
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("sandboxd binary %s: %w: adapt bakes a static Linux build of sandboxd (make build)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("sandboxd binary %s is dynamically linked: an image may lack its loader and libc; build it with CGO_ENABLED=0 (make build)", path)
		}
	}
	arch := map[elf.Machine]string{
		elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
		elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
	}[f.Machine]
	if arch == "" {
		return "", fmt.Errorf("sandboxd binary %s: unknown machine %v", path, f.Machine)
	}
	return arch, nil
}

// builder holds what every group's build shares.
type builder struct {
	o    Options
	arch string
	mu   *sync.Mutex // serialises lines on o.Log
}

// say prints one progress line for a group ("" = the run).
func (b *builder) say(group, format string, args ...any) {
	prefix := "sandboxd adapt: "
	if group != "" {
		prefix = "[" + group + "] "
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.o.Log, prefix+format+"\n", args...)
}

// stream is where a group's engine output goes: every line prefixed with
// the group, whole lines at a time.
func (b *builder) stream(g *Group) io.Writer {
	return &lineWriter{mu: b.mu, w: b.o.Log, prefix: "[" + g.Name + "]   "}
}

// group builds one group: base, tools, sidecars, serving layer, task images,
// compose files, push.
func (b *builder) group(ctx context.Context, g *Group) (GroupEntry, []TaskEntry, error) {
	ge := GroupEntry{Name: g.Name, Image: g.Image, Hash: g.Hash, Tasks: g.TaskNames(), Base: g.Base.From}
	eng := b.o.Engine
	log := b.stream(g)
	b.say(g.Name, "%d task(s): %s; base: %s", len(g.Tasks), strings.Join(g.TaskNames(), ", "), g.Base.From)

	base, err := b.base(ctx, g, log)
	if err != nil {
		return ge, nil, err
	}
	ge.BaseID = base.ID
	if base.OS != "" && base.OS != "linux" {
		return ge, nil, &RefusedError{Image: g.Base.From, Reason: fmt.Sprintf("it is a %s image; sandboxd serves Linux images only", base.OS)}
	}
	if base.Architecture != "" && base.Architecture != b.arch {
		return ge, nil, &RefusedError{Image: g.Base.From, Reason: fmt.Sprintf("it is linux/%s and this sandboxd is linux/%s: run adapt with a sandboxd built for %s (GOARCH=%s make build)",
			base.Architecture, b.arch, base.Architecture, base.Architecture)}
	}

	probe, err := b.probe(ctx, g, base)
	if err != nil {
		return ge, nil, err
	}
	lower := base
	bins, _ := probe.Missing()
	hmissing := probe.harborMissing()
	if b.o.HarborTools == HarborToolsOff {
		hmissing = nil
	}
	pkgs := probe.toInstall(b.o.HarborTools)
	if len(hmissing) > 0 && probe.PackageManager == "" {
		w := fmt.Sprintf("the base lacks %s (the tools Harbor's agents expect) and has no package manager to install them: the agent gets none of them (--require-harbor-tools refuses such an image)", strings.Join(hmissing, ", "))
		b.say(g.Name, "warning: %s", w)
		for _, it := range g.Tasks {
			it.Warnings = append(it.Warnings, w)
		}
	}
	if len(pkgs) > 0 && eng.LoadsPartialArchives() {
		how := ""
		if probe.PackageManager == "apt-get" {
			how = " without recommended packages (--no-install-recommends)"
		}
		b.say(g.Name, "the base lacks %s: installing %s with %s%s", strings.Join(append(bins, hmissing...), ", "), strings.Join(pkgs, " "), probe.PackageManager, how)
		start := time.Now()
		if lower, err = b.tools(ctx, g, base, log); err != nil {
			return ge, nil, err
		}
		ge.ToolsID = lower.ID
		ge.ToolsSeconds = time.Since(start).Seconds()
		ge.ToolsBytes = lower.Size - base.Size
	}
	ge.Installed = pkgs
	// What the adapted image has is probed again once something was
	// installed, so that the report says what is there, not what was asked.
	after := probe
	if len(pkgs) > 0 && eng.LoadsPartialArchives() && len(hmissing) > 0 {
		if after, err = b.probe(ctx, g, lower); err != nil {
			return ge, nil, err
		}
	}

	sidecarImages := map[string]string{}
	for _, s := range g.Sidecars {
		ref := g.SidecarImage(s)
		sidecarImages[s.Name] = ref
		ge.Sidecars = append(ge.Sidecars, SidecarEntry{Service: s.Name, Image: ref, Built: s.Build != nil})
		if s.Build == nil {
			continue
		}
		rel, _ := filepath.Rel(filepath.Dir(g.Compose.Path), filepath.Join(s.Build.Context, s.Build.Dockerfile))
		b.say(g.Name, "building sidecar %s from environment/%s", s.Name, filepath.ToSlash(rel))
		if _, err := eng.Build(ctx, engine.BuildSpec{What: "sidecar " + s.Name, Context: s.Build.Context, Dockerfile: s.Build.Dockerfile,
			Args: s.Build.Args, Tags: []string{ref}, Timeout: g.Base.Timeout}, log); err != nil {
			return ge, nil, err
		}
	}

	facts := FactsOf(base)
	for _, w := range facts.EnvWarnings() {
		b.say(g.Name, "warning: %s", w)
		for _, it := range g.Tasks {
			it.Warnings = append(it.Warnings, w)
		}
	}
	layer, err := b.servingLayer(g, func(it *Item, extraEnv []string, peers []task.Peer) ([]byte, error) {
		return SandboxdTOML(it.Task, facts, extraEnv, peers, "authorized_keys")
	})
	if err != nil {
		return ge, nil, err
	}
	if !probe.Root {
		// USER root needs root in /etc/passwd; uid 0 does not.
		layer.Settings.User = "0"
	}

	tmp, err := os.MkdirTemp("", "sandboxd-adapt-"+g.Name+"-")
	if err != nil {
		return ge, nil, fmt.Errorf("group %s: %w", g.Name, err)
	}
	defer os.RemoveAll(tmp)
	ids := map[string]string{}
	if eng.LoadsPartialArchives() {
		ids, err = b.load(ctx, g, base, lower, layer, tmp, log)
		if err != nil {
			b.say(g.Name, "the engine did not take the image archive (%v); building a Dockerfile instead", err)
		} else {
			ge.Assembly = "load"
		}
	}
	if ge.Assembly == "" {
		if ids, err = b.build(ctx, g, lower, layer, tmp, log); err != nil {
			return ge, nil, err
		}
		ge.Assembly = "build"
	}

	img, err := eng.Inspect(ctx, g.Image)
	if err != nil {
		return ge, nil, err
	}
	if ge.ToolsID == "" && len(hmissing) > 0 && probe.PackageManager != "" {
		// The serving Dockerfile installed them itself.
		if after, err = b.probe(ctx, g, img); err != nil {
			return ge, nil, err
		}
	}
	ge.HarborTools = harborReport(b.o.HarborTools, probe, after)
	ge.Digest = img.ID
	ge.LayerBytes = img.Size - base.Size

	var tasks []TaskEntry
	for _, it := range g.Tasks {
		e := taskEntry(it, g)
		e.Digest = ids[it.Image]
		e.HarborTools = ge.HarborTools
		if g.Compose != nil {
			if e.Compose, err = b.writeCompose(g, it, b.o.ComposeDir, sidecarImages); err != nil {
				return ge, nil, err
			}
		}
		tasks = append(tasks, e)
	}

	if b.o.Push {
		refs := []string{g.Image}
		for _, it := range g.Tasks {
			refs = append(refs, it.Image)
		}
		for _, s := range g.Sidecars {
			if s.Build != nil {
				refs = append(refs, sidecarImages[s.Name])
			}
		}
		digests := map[string]string{}
		for _, ref := range refs {
			b.say(g.Name, "pushing %s", ref)
			if err := eng.Push(ctx, ref, log); err != nil {
				return ge, nil, err
			}
			if img, err := eng.Inspect(ctx, ref); err == nil {
				digests[ref] = repoDigest(img, ref)
			}
		}
		ge.RepoDigest = digests[g.Image]
		for i := range tasks {
			tasks[i].RepoDigest = digests[tasks[i].Image]
		}
	}
	return ge, tasks, nil
}

// repoDigest picks the RepoDigests entry of ref's repository.
func repoDigest(img *engine.Image, ref string) string {
	repo := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	}
	for _, d := range img.RepoDigests {
		if strings.HasPrefix(d, repo+"@") {
			return d
		}
	}
	return ""
}

// base builds or takes the group's base image and reads its config.
func (b *builder) base(ctx context.Context, g *Group, log io.Writer) (*engine.Image, error) {
	eng := b.o.Engine
	if g.Base.Image != "" {
		img, err := eng.Inspect(ctx, g.Base.Image)
		if errors.Is(err, engine.ErrNoImage) {
			b.say(g.Name, "pulling %s", g.Base.Image)
			if err := eng.Pull(ctx, g.Base.Image, log); err != nil {
				return nil, fmt.Errorf("base %s is not in the local engine and pulling it failed: %w", g.Base.Image, err)
			}
			img, err = eng.Inspect(ctx, g.Base.Image)
		}
		return img, err
	}
	b.say(g.Name, "building %s (build_timeout_sec %s)", g.Base.From, g.Base.Timeout)
	id, err := eng.Build(ctx, engine.BuildSpec{What: g.Base.From + " of " + strings.Join(g.TaskNames(), ", "),
		Context: g.Base.Context, Dockerfile: g.Base.Dockerfile, Args: g.Base.Args, Timeout: g.Base.Timeout}, log)
	if err != nil {
		return nil, err
	}
	return eng.Inspect(ctx, id)
}

// probe asks the base which sandbox programs and package manager it has.
func (b *builder) probe(ctx context.Context, g *Group, base *engine.Image) (Probe, error) {
	out, code, err := b.o.Engine.Run(ctx, base.ID, probeScript())
	switch {
	case err != nil:
		return Probe{}, fmt.Errorf("probe base %s: %w", g.Base.From, err)
	case code == 126 || code == 127:
		return Probe{}, &RefusedError{Image: g.Base.From, Reason: "it has no /bin/sh, so adapt can neither check for bwrap nor install it, and agent sessions would have no shell: base the image on one with a shell"}
	case code != 0:
		return Probe{}, fmt.Errorf("probe base %s: exit status %d: %s", g.Base.From, code, strings.TrimSpace(out))
	}
	p, err := parseProbe(out)
	if err != nil {
		return p, fmt.Errorf("probe base %s: %w", g.Base.From, err)
	}
	if r := p.Refusal(b.o.HarborTools); r != "" {
		return p, &RefusedError{Image: g.Base.From, Reason: r}
	}
	return p, nil
}

// tools installs what base lacks (bubblewrap, Harbor's agent tools) with the
// image's package manager, as a build (so the engine's cache makes the next
// adapt instant).
func (b *builder) tools(ctx context.Context, g *Group, base *engine.Image, log io.Writer) (*engine.Image, error) {
	dir, err := os.MkdirTemp("", "sandboxd-adapt-tools-")
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", g.Name, err)
	}
	defer os.RemoveAll(dir)
	df := "ARG BASE\nFROM ${BASE}\nUSER root\nRUN " + jsonArray([]string{"/bin/sh", "-c", ensureToolsScript(b.o.HarborTools)}) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return nil, fmt.Errorf("group %s: %w", g.Name, err)
	}
	id, err := b.o.Engine.Build(ctx, engine.BuildSpec{What: "the tools install over " + g.Base.From, Context: dir, Dockerfile: "Dockerfile",
		Args: map[string]string{"BASE": base.ID}, Timeout: g.Base.Timeout}, log)
	if err != nil {
		return nil, asRefusal(g, err)
	}
	return b.o.Engine.Inspect(ctx, id)
}

// asRefusal turns a build that ensureToolsScript refused into a RefusedError
// with the script's reason.
func asRefusal(g *Group, err error) error {
	var be *engine.BuildError
	if errors.As(err, &be) {
		for _, line := range be.Tail {
			if i := strings.Index(line, refusedMarker); i >= 0 {
				return &RefusedError{Image: g.Base.From, Reason: line[i+len(refusedMarker):]}
			}
		}
	}
	return err
}

// servingLayer assembles the layer with each task's sandboxd.toml from toml.
func (b *builder) servingLayer(g *Group, toml func(it *Item, extraEnv []string, peers []task.Peer) ([]byte, error)) (*Layer, error) {
	var extraEnv []string
	var peers []task.Peer
	if g.Compose != nil {
		if g.Compose.Main != nil {
			extraEnv = g.Compose.Main.Env
		}
		for _, p := range g.Compose.Peers() {
			peers = append(peers, p)
		}
	}
	tomls := map[string][]byte{}
	for _, it := range g.Tasks {
		data, err := toml(it, extraEnv, peers)
		if err != nil {
			return nil, err
		}
		tomls[it.Task.Name] = data
	}
	return ServingLayer(g, b.o.Binary, b.o.Version, tomls)
}

// writeCompose emits the compose file of a compose task under dir, with the
// seccomp profile next to it when adapt knows where it is.
func (b *builder) writeCompose(g *Group, it *Item, dir string, sidecarImages map[string]string) (string, error) {
	out := filepath.Join(dir, g.Dataset, tagName(it.Task.Name))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("compose file for %s: %w", it.Task.Name, err)
	}
	header := fmt.Sprintf("# Generated by sandboxd adapt %s from %s.\n"+
		"# main is the adapted task; the other services are its peers, reached by name from the sandbox.\n"+
		"# Run with Docker Compose v2 (docker-compose 1.x rejects systempaths=unconfined):\n"+
		"#   SANDBOXD_AUTHORIZED_KEYS=\"$(cat key.pub)\" docker compose -f docker-compose.yaml up -d\n"+
		"# seccomp.json is sandboxd's images/seccomp.json (docs/container-flags.md).\n",
		b.o.Version, g.Compose.Path)
	data, err := g.Compose.Emit(it.Image, sidecarImages, header)
	if err != nil {
		return "", err
	}
	path := filepath.Join(out, "docker-compose.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("compose file for %s: %w", it.Task.Name, err)
	}
	if b.o.Seccomp != "" {
		prof, err := os.ReadFile(b.o.Seccomp)
		if err != nil {
			return "", fmt.Errorf("seccomp profile for %s's compose file: %w", it.Task.Name, err)
		}
		if err := os.WriteFile(filepath.Join(out, "seccomp.json"), prof, 0o644); err != nil {
			return "", fmt.Errorf("compose file for %s: %w", it.Task.Name, err)
		}
	} else {
		b.say(g.Name, "%s: copy sandboxd's images/seccomp.json next to it before running it", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, nil
	}
	return abs, nil
}
