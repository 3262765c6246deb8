package layer

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/pkg/layer/archive"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// HarnessDir is where an adapted image keeps sandboxd's own state (design: "harness dir").
const HarnessDir = "/media/sandboxd"

// BinaryPath is the sandboxd binary inside an adapted image.
const BinaryPath = HarnessDir + "/bin/sandboxd"

// Labels adapt sets on the images it makes.
const (
	LabelVersion = "org.sandboxd.version" // sandboxd's version
	LabelTasks   = "org.sandboxd.tasks"   // the task names the image carries, comma-separated
	LabelTask    = "org.sandboxd.task"    // on a task image: the task it serves
	LabelGroup   = "org.sandboxd.group"   // <dataset>-<hash12>
)

// File is one entry of a layer.
type File struct {
	Path string      // absolute path in the image
	Mode fs.FileMode // permission bits, plus fs.ModeDir for a directory
	Src  string      // host file with the content; "" with Data
	Data []byte
}

// Settings are the config changes an image makes over the one below it. The
// same value renders as Dockerfile instructions and as a config for an
// image archive, so both routes produce the same image.
type Settings struct {
	User        string
	Entrypoint  []string
	Cmd         []string // non-nil: set (an empty list clears the base's)
	Env         []string // NAME=VALUE, laid over the base's
	Labels      map[string]string
	Healthcheck []string // CMD form; nil = keep the base's
	StopSignal  string
	Expose      []string // "2222/tcp"
}

// Healthcheck timing: a container is healthy once sandboxd's status answers,
// which is when sessions can join.
const (
	healthInterval = 5 * time.Second
	healthTimeout  = 10 * time.Second
	healthRetries  = 3
)

// Layer is the serving layer of a group: the files under the harness dir and
// the config that makes the image run sandboxd serve.
type Layer struct {
	Files    []File
	Settings Settings
}

// ServingLayer describes what adapt adds to a group's base: the binary, each
// task's files and sandboxd.toml under HarnessDir/tasks/<name>/, sandboxd as
// the entrypoint with no command, USER root (serve needs root in the
// substrate; the agent's user comes from the facts), SIGTERM as the stop
// signal (serve's clean stop), sandboxd's status as the health check (the
// base's own would probe the substrate, where the task's services no longer
// listen: they run in the sandbox's network), the SSH ports, and the labels.
func ServingLayer(g *Group, binary, version string, tomls map[string][]byte) (*Layer, error) {
	l := &Layer{}
	dirs := map[string]bool{}
	addDir := func(p string) {
		for d := p; d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	add := func(f File) {
		addDir(path.Dir(f.Path))
		l.Files = append(l.Files, f)
	}
	add(File{Path: BinaryPath, Mode: 0o755, Src: binary})
	ports := map[string]bool{}
	for _, it := range g.Tasks {
		t := it.Task
		root := HarnessDir + "/tasks/" + t.Name
		add(File{Path: root + "/" + task.PathTaskTOML, Mode: 0o644, Src: filepath.Join(it.Dir, task.PathTaskTOML)})
		add(File{Path: root + "/" + task.PathInstruction, Mode: 0o644, Src: filepath.Join(it.Dir, task.PathInstruction)})
		add(File{Path: root + "/" + task.PathSandboxdTOML, Mode: 0o644, Data: tomls[t.Name]})
		if t.Sandboxd.AuthorizedKeys != "" {
			add(File{Path: root + "/authorized_keys", Mode: 0o644, Src: t.Sandboxd.AuthorizedKeys})
		}
		files, err := treeFiles(filepath.Join(it.Dir, "tests"), root+"/tests")
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", t.Name, err)
		}
		for _, f := range files {
			if f.Mode.IsDir() {
				addDir(f.Path)
				continue
			}
			add(f)
		}
		port := "2222"
		if t.Sandboxd.Listen != "" {
			if i := strings.LastIndex(t.Sandboxd.Listen, ":"); i >= 0 {
				port = t.Sandboxd.Listen[i+1:]
			}
		}
		ports[port+"/tcp"] = true
	}
	for d := range dirs {
		l.Files = append(l.Files, File{Path: d, Mode: fs.ModeDir | 0o755})
	}
	sort.Slice(l.Files, func(i, j int) bool { return l.Files[i].Path < l.Files[j].Path })
	l.Settings = Settings{
		User:        "root",
		Entrypoint:  []string{BinaryPath, "serve"},
		Cmd:         []string{},
		Healthcheck: []string{"CMD", BinaryPath, "status", "--ready"},
		StopSignal:  "SIGTERM",
		Labels: map[string]string{
			LabelVersion:                           version,
			LabelTasks:                             strings.Join(g.TaskNames(), ","),
			LabelGroup:                             g.Name,
			"org.opencontainers.image.title":       g.Name,
			"org.opencontainers.image.description": fmt.Sprintf("Harbor tasks served by sandboxd %s: %s", version, strings.Join(g.TaskNames(), ", ")),
		},
	}
	if g.Base.Image != "" {
		l.Settings.Labels["org.opencontainers.image.base.name"] = g.Base.Image
	}
	for p := range ports {
		l.Settings.Expose = append(l.Settings.Expose, p)
	}
	sort.Strings(l.Settings.Expose)
	return l, nil
}

// TaskSettings are the config of a task's image over its group's: the command
// names the task (`docker run <task image>` serves it), and so does
// SANDBOXD_TASK, because Harbor replaces the command with `sh -c "sleep
// infinity"` and the name must survive that.
func TaskSettings(it *Item, group string) Settings {
	return Settings{
		Cmd:    []string{"--task", it.Task.Name},
		Env:    []string{"SANDBOXD_TASK=" + it.Task.Name},
		Labels: map[string]string{LabelTask: it.Task.Name, LabelGroup: group},
	}
}

// treeFiles lists the files and directories under root (a task's tests/), to
// be placed under dest. Symlinks are refused: a link in tests/ would point
// into the build host, or be resolved differently in the image.
func treeFiles(root, dest string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		rel, _ := filepath.Rel(root, p)
		target := dest
		if rel != "." {
			target = dest + "/" + filepath.ToSlash(rel)
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		switch {
		case d.IsDir():
			out = append(out, File{Path: target, Mode: fs.ModeDir | 0o755})
		case info.Mode().IsRegular():
			out = append(out, File{Path: target, Mode: info.Mode().Perm(), Src: p})
		default:
			return fmt.Errorf("%s is a %s: tests/ may hold only files and directories", p, info.Mode().Type())
		}
		return nil
	})
	return out, err
}

// WriteTar writes the layer's files as an uncompressed tar (a layer diff) and
// returns its sha256, the layer's diff ID.
func (l *Layer) WriteTar(w io.Writer) (string, error) {
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	for _, f := range l.Files {
		name := strings.TrimPrefix(f.Path, "/")
		hdr := &tar.Header{Name: name, Mode: int64(f.Mode.Perm()), ModTime: archive.ModTime, Format: tar.FormatPAX}
		if f.Mode.IsDir() {
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return "", fmt.Errorf("write layer entry %s: %w", f.Path, err)
			}
			continue
		}
		data := f.Data
		if f.Src != "" {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return "", fmt.Errorf("layer file %s: %w", f.Path, err)
			}
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return "", fmt.Errorf("write layer entry %s: %w", f.Path, err)
		}
		if _, err := tw.Write(data); err != nil {
			return "", fmt.Errorf("write layer entry %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("write layer: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// WriteContext lays the files out under dir/rootfs, for a Dockerfile's
// `COPY rootfs/ /`.
func (l *Layer) WriteContext(dir string) error {
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("write build context %s: %w", dir, err)
	}
	for _, f := range l.Files {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		if f.Mode.IsDir() {
			if err := os.MkdirAll(p, f.Mode.Perm()); err != nil {
				return fmt.Errorf("write build context: %w", err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write build context: %w", err)
		}
		data := f.Data
		if f.Src != "" {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return fmt.Errorf("build context file %s: %w", f.Path, err)
			}
		}
		if err := os.WriteFile(p, data, f.Mode.Perm()); err != nil {
			return fmt.Errorf("write build context: %w", err)
		}
		// WriteFile's mode passes through the umask; the image must have the
		// task's own bits (an executable test.sh stays executable).
		if err := os.Chmod(p, f.Mode.Perm()); err != nil {
			return fmt.Errorf("write build context: %w", err)
		}
	}
	return nil
}

// Instructions renders the settings as Dockerfile instructions.
func (s Settings) Instructions() []string {
	var out []string
	q := jsonArray
	if s.User != "" {
		out = append(out, "USER "+s.User)
	}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, "ENV "+k+"="+strconv.Quote(v))
	}
	if s.Entrypoint != nil {
		out = append(out, "ENTRYPOINT "+q(s.Entrypoint))
	}
	if s.Cmd != nil {
		out = append(out, "CMD "+q(s.Cmd))
	}
	if s.Healthcheck != nil {
		out = append(out, fmt.Sprintf("HEALTHCHECK --interval=%s --timeout=%s --retries=%d CMD %s",
			healthInterval, healthTimeout, healthRetries, q(s.Healthcheck[1:])))
	}
	if s.StopSignal != "" {
		out = append(out, "STOPSIGNAL "+s.StopSignal)
	}
	if len(s.Expose) > 0 {
		out = append(out, "EXPOSE "+strings.Join(s.Expose, " "))
	}
	if len(s.Labels) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
			kv = append(kv, strconv.Quote(k)+"="+strconv.Quote(s.Labels[k]))
		}
		out = append(out, "LABEL "+strings.Join(kv, " \\\n      "))
	}
	return out
}

// Apply lays the settings over an image config in Docker's format (the
// "config" object of an image's config JSON), as a build would.
func (s Settings) Apply(cfg map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range cfg {
		out[k] = v
	}
	if s.User != "" {
		out["User"] = s.User
	}
	if len(s.Env) > 0 {
		var base []string
		env, _ := out["Env"].([]any)
		for _, e := range env {
			base = append(base, fmt.Sprint(e))
		}
		if l, ok := out["Env"].([]string); ok {
			base = l
		}
		out["Env"] = mergeEnv(base, s.Env)
	}
	if s.Entrypoint != nil {
		out["Entrypoint"] = s.Entrypoint
		// A Dockerfile's ENTRYPOINT clears an inherited CMD; do the same.
		if s.Cmd == nil {
			out["Cmd"] = nil
		}
	}
	if s.Cmd != nil {
		out["Cmd"] = s.Cmd
	}
	if s.Healthcheck != nil {
		out["Healthcheck"] = map[string]any{
			"Test":     s.Healthcheck,
			"Interval": healthInterval.Nanoseconds(),
			"Timeout":  healthTimeout.Nanoseconds(),
			"Retries":  healthRetries,
		}
	}
	if s.StopSignal != "" {
		out["StopSignal"] = s.StopSignal
	}
	if len(s.Expose) > 0 {
		ports := map[string]any{}
		if m, ok := out["ExposedPorts"].(map[string]any); ok {
			for k, v := range m {
				ports[k] = v
			}
		}
		for _, p := range s.Expose {
			ports[p] = map[string]any{}
		}
		out["ExposedPorts"] = ports
	}
	if len(s.Labels) > 0 {
		labels := map[string]any{}
		if m, ok := out["Labels"].(map[string]any); ok {
			for k, v := range m {
				labels[k] = v
			}
		}
		for k, v := range s.Labels {
			labels[k] = v
		}
		out["Labels"] = labels
	}
	return out
}

// jsonArray renders an exec-form argument list as a Dockerfile writes it:
// JSON, with < > & left as they are.
func jsonArray(v []string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSpace(b.String())
}
