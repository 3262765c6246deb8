package layer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/pkg/layer/compose"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Plan is the outcome of reading the task directories: the groups to build
// and the tasks refused before any engine is asked.
type Plan struct {
	Groups   []*Group
	Failures []Failure
}

// Failure is a task that was not adapted, and why.
type Failure struct {
	Dir  string // as given
	Name string // the task's name (its directory's), when known
	Err  error
}

// Group is a set of tasks that share one image.
type Group struct {
	Prefix   string // the --tag prefix
	Dataset  string // the task directories' parent's name, as a repository component
	Hash     string // EnvHash (with the interpolated compose file's Digest, for a compose task), hex
	Name     string // <dataset>-<hash12>
	Image    string // <prefix>/<name>:latest
	Base     Source // how the base image is made
	Sidecars []*compose.Service
	Compose  *compose.File // the first task's parsed compose file; every task of the group has the same
	Tasks    []*Item
}

// Item is one task of a group.
type Item struct {
	Task     *task.Task
	Dir      string // absolute
	Image    string // <prefix>/<dataset>:<task tag>, the config-only image that names the task
	Warnings []string
}

// Source is where a group's base image comes from.
type Source struct {
	Image      string            // a reference to take as is (docker_image, or compose main's image:)
	Context    string            // else: the build context, absolute
	Dockerfile string            // relative to Context
	Args       map[string]string // build arguments (compose build.args)
	From       string            // what to tell people: "environment/Dockerfile", "docker_image ubuntu:24.04"
	Timeout    time.Duration     // the longest build_timeout_sec among the group's tasks
}

// ExpandDirs replaces a directory that is not a task but holds tasks (a
// dataset) with those tasks, so `adapt datasets/tb2` works like `adapt
// datasets/tb2/*`. Anything else is kept for Plan to judge.
func ExpandDirs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, task.PathTaskTOML)); err == nil {
			out = append(out, d)
			continue
		}
		entries, err := os.ReadDir(d)
		var kids []string
		if err == nil {
			for _, e := range entries {
				k := filepath.Join(d, e.Name())
				if _, err := os.Stat(filepath.Join(k, task.PathTaskTOML)); err == nil && e.IsDir() {
					kids = append(kids, k)
				}
			}
		}
		if len(kids) == 0 {
			out = append(out, d)
			continue
		}
		out = append(out, kids...)
	}
	return out
}

// MakePlan loads every task directory, refuses what sandboxd cannot serve, and
// groups the rest. It reads files only; no engine is involved.
func MakePlan(dirs []string, prefix string) *Plan {
	p := &Plan{}
	byKey := map[string]*Group{}
	seenDir := map[string]bool{}
	seenImage := map[string]string{}
	for _, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			p.Failures = append(p.Failures, Failure{Dir: dir, Err: fmt.Errorf("task directory %s: %w", dir, err)})
			continue
		}
		if seenDir[abs] {
			continue
		}
		seenDir[abs] = true
		it, g, err := planTask(abs, prefix)
		if err != nil {
			p.Failures = append(p.Failures, Failure{Dir: dir, Name: filepath.Base(abs), Err: err})
			continue
		}
		// Two directories with the same name in datasets of the same name
		// would get one tag and one place under the harness dir.
		if other, ok := seenImage[it.Image]; ok {
			p.Failures = append(p.Failures, Failure{Dir: dir, Name: it.Task.Name,
				Err: fmt.Errorf("task %s: its image %s is already the name of %s: adapt the two in separate runs or with different --tag prefixes", it.Task.Name, it.Image, other)})
			continue
		}
		seenImage[it.Image] = abs
		key := g.Dataset + "/" + g.Hash
		if have, ok := byKey[key]; ok {
			if it.Task.Environment.BuildTimeout > have.Base.Timeout {
				have.Base.Timeout = it.Task.Environment.BuildTimeout
			}
			have.Tasks = append(have.Tasks, it)
			continue
		}
		g.Tasks = []*Item{it}
		byKey[key] = g
		p.Groups = append(p.Groups, g)
	}
	sort.Slice(p.Groups, func(i, j int) bool { return p.Groups[i].Name < p.Groups[j].Name })
	for _, g := range p.Groups {
		sort.Slice(g.Tasks, func(i, j int) bool { return g.Tasks[i].Task.Name < g.Tasks[j].Task.Name })
	}
	return p
}

// planTask loads one task and works out its group (not yet shared).
func planTask(dir, prefix string) (*Item, *Group, error) {
	t, err := task.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	it := &Item{Task: t, Dir: dir, Warnings: append([]string{}, t.Warnings...)}
	var c *compose.File
	if t.ComposeFile != "" {
		if c, err = compose.ForTask(t); err != nil {
			return nil, nil, err
		}
		it.Warnings = append(it.Warnings, c.Warnings...)
	}
	src, warns, err := baseSource(t, c)
	if err != nil {
		return nil, nil, err
	}
	it.Warnings = append(it.Warnings, warns...)
	hash, err := EnvHash(t)
	if err != nil {
		return nil, nil, err
	}
	if c != nil {
		// Interpolation can make one environment/ two compose projects.
		sum := sha256.Sum256([]byte(hash + "\ncompose " + c.Digest()))
		hash = hex.EncodeToString(sum[:])
	}
	dataset := repoName(filepath.Base(filepath.Dir(dir)))
	name := dataset + "-" + hash[:12]
	g := &Group{
		Prefix:  prefix,
		Dataset: dataset,
		Hash:    hash,
		Name:    name,
		Image:   withTag(prefix + "/" + name),
		Base:    src,
		Compose: c,
	}
	if c != nil {
		g.Sidecars = c.Sidecars
	}
	it.Image = prefix + "/" + dataset + ":" + tagName(t.Name)
	return it, g, nil
}

// ErrNoEnvironment marks a task with nothing to build an image from.
var ErrNoEnvironment = errors.New("no environment")

// baseSource decides where the base comes from, in Harbor's order: the
// compose file's main (image: or build:), else docker_image (Harbor takes the
// prebuilt image unless told to build), else environment/Dockerfile.
func baseSource(t *task.Task, c *compose.File) (Source, []string, error) {
	src := Source{Timeout: t.Environment.BuildTimeout}
	var warns []string
	envDir := filepath.Join(t.Dir, "environment")
	switch {
	case c != nil && c.Main != nil && c.Main.Image != "" && c.Main.Build == nil && !c.Main.HarborImage:
		src.Image = c.Main.Image
		src.From = "compose main image " + c.Main.Image
	case c != nil && c.Main != nil && c.Main.Build != nil:
		src.Context, src.Dockerfile, src.Args = c.Main.Build.Context, c.Main.Build.Dockerfile, c.Main.Build.Args
		rel, _ := filepath.Rel(t.Dir, filepath.Join(src.Context, src.Dockerfile))
		src.From = filepath.ToSlash(rel) + " (compose main build)"
	case t.Environment.DockerImage != "":
		src.Image = t.Environment.DockerImage
		src.From = "docker_image " + src.Image
		if t.Dockerfile != "" {
			warns = append(warns, t.Dockerfile+": not built: docker_image is set, and Harbor takes the prebuilt image then")
		}
	case t.Dockerfile != "":
		src.Context, src.Dockerfile = envDir, "Dockerfile"
		src.From = task.PathDockerfile
	default:
		return src, nil, &task.FieldError{
			Pos: task.Pos{File: filepath.Join(t.Dir, task.PathTaskTOML), Key: "environment.docker_image"},
			Msg: "the task has no environment/Dockerfile and no docker_image, so there is no image to adapt: add one",
			Err: ErrNoEnvironment,
		}
	}
	if src.Context != "" {
		if _, err := os.Stat(filepath.Join(src.Context, src.Dockerfile)); err != nil {
			return src, nil, &task.FieldError{Pos: task.Pos{File: filepath.Join(src.Context, src.Dockerfile)},
				Msg: "missing: the base image is built from it", Err: err}
		}
	}
	return src, warns, nil
}

// TaskNames lists a group's task names, in order.
func (g *Group) TaskNames() []string {
	out := make([]string, len(g.Tasks))
	for i, it := range g.Tasks {
		out[i] = it.Task.Name
	}
	return out
}

// SidecarImage is the tag adapt gives a sidecar it builds.
func (g *Group) SidecarImage(s *compose.Service) string {
	if s.Build == nil {
		return s.Image
	}
	return withTag(g.Prefix + "/" + g.Name + "-" + repoName(s.Name))
}

// String names the group for progress lines.
func (g *Group) String() string {
	return fmt.Sprintf("%s (%s)", g.Name, strings.Join(g.TaskNames(), ", "))
}
