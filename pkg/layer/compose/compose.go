// Package compose reads a task's environment/docker-compose.yaml for adapt,
// interpolated as Compose does under Harbor (interpolate.go, vars.go), and
// writes the compose file adapt emits next to the adapted images: the
// `main` service is the one adapted, the others become peers of main's
// sandbox and sidecars beside it.
package compose

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/pkg/task"
)

// File is what adapt takes from a task's environment/docker-compose.yaml:
// the `main` service (the one adapted), and the others, which become peers of
// main's sandbox and sidecars in the compose file adapt emits.
type File struct {
	Path     string     // the file
	Main     *Service   // services.main; nil when the file only adds services (Harbor supplies main)
	Sidecars []*Service // every other service, by name
	Extra    map[string]any
	Warnings []string
}

// Service is one compose service.
type Service struct {
	Name  string
	Line  int            // where it is declared, for messages
	Raw   map[string]any // every key as written, carried into the emitted file
	Image string         // image:, "" when built
	Build *Build         // build:, nil when image: names it
	Port  int            // the first TCP port it declares (expose:, then ports:); 0 = none
	Env   []string       // environment: as NAME=VALUE, for main's image facts
	// HarborImage is main's image: naming ${MAIN_IMAGE_NAME}, Harbor's tag
	// for the task's own build, which its base compose file builds from
	// environment/ (or takes from docker_image): not an image to pull.
	HarborImage bool
}

// Build is a compose service's build: section, resolved against the file's directory.
type Build struct {
	Context    string // absolute directory
	Dockerfile string // relative to Context
	Args       map[string]string
}

// ForTask reads t's compose file as Compose reads it under Harbor:
// interpolated with Harbor's variables, t's [environment].env and the
// environment/.env file next to it.
func ForTask(t *task.Task) (*File, error) {
	return ParseWith(t.ComposeFile, Vars{Infra: HarborVars(t), Task: t.EnvironmentEnv()})
}

// Parse reads a compose file interpolated with the .env file next to it
// only; ForTask is the reading of a task's.
func Parse(path string) (*File, error) { return ParseWith(path, Vars{}) }

// ParseWith reads a compose file interpolated with vars and the .env file
// next to it. Errors are *task.FieldError with the file, line and key, like
// task.toml's.
func ParseWith(path string, vars Vars) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &task.FieldError{Pos: task.Pos{File: path}, Msg: "cannot be read: " + err.Error(), Err: err}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &task.FieldError{Pos: task.Pos{File: path, Line: yamlErrLine(err)}, Msg: "is not valid YAML: " + err.Error(), Err: err}
	}
	fail := func(n *yaml.Node, key, format string, args ...any) error {
		line := 0
		if n != nil {
			line = n.Line
		}
		return &task.FieldError{Pos: task.Pos{File: path, Line: line, Key: key}, Msg: fmt.Sprintf(format, args...)}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fail(nil, "", "is not a compose file: it needs a top-level mapping with services:")
	}
	root := doc.Content[0]
	c := &File{Path: path, Extra: map[string]any{}}
	dotenv, err := readDotenv(filepath.Join(filepath.Dir(path), ".env"), vars.lookup(nil))
	if err != nil {
		return nil, err
	}
	warns, err := interpolateNode(path, "", root, vars.lookup(dotenv), map[string]bool{})
	if err != nil {
		return nil, err
	}
	c.Warnings = append(c.Warnings, warns...)
	var services *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "include":
			// Half-reading a project made of several files would adapt a
			// different task than Harbor runs.
			return nil, fail(k, "include", "names other compose files, which adapt does not read: put their services into docker-compose.yaml")
		case "services":
			services = v
		case "version", "name":
			// Obsolete or per-project: the emitted file names neither.
		case "volumes", "networks":
			var val any
			if err := v.Decode(&val); err != nil {
				return nil, fail(v, k.Value, "%v", err)
			}
			c.Extra[k.Value] = val
		default:
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s:%d: top-level %q is not carried into the emitted compose file", path, k.Line, k.Value))
		}
	}
	if services == nil || services.Kind != yaml.MappingNode || len(services.Content) == 0 {
		return nil, fail(services, "services", "names no services: declare main and its sidecars under services:")
	}
	dir := filepath.Dir(path)
	for i := 0; i+1 < len(services.Content); i += 2 {
		k, v := services.Content[i], services.Content[i+1]
		s, warns, err := parseService(path, dir, k, v)
		if err != nil {
			return nil, err
		}
		if s.Name == "main" && s.Build == nil && s.Image != "" && s.Image == vars.Infra["MAIN_IMAGE_NAME"] {
			s.HarborImage = true
		}
		c.Warnings = append(c.Warnings, warns...)
		if s.Name == "main" {
			c.Main = s
			continue
		}
		c.Sidecars = append(c.Sidecars, s)
	}
	sort.Slice(c.Sidecars, func(i, j int) bool { return c.Sidecars[i].Name < c.Sidecars[j].Name })
	for _, s := range c.Sidecars {
		if s.Image == "" && s.Build == nil {
			return nil, fail(&yaml.Node{Line: s.Line}, "services."+s.Name, "has neither image: nor build:, so there is nothing to run: add one")
		}
		if s.Port == 0 {
			return nil, fail(&yaml.Node{Line: s.Line}, "services."+s.Name,
				`declares no TCP port, so sandboxd cannot offer it inside the sandbox: add expose: ["6379"] (the port the service listens on)`)
		}
	}
	return c, nil
}

func parseService(path, dir string, k, v *yaml.Node) (*Service, []string, error) {
	key := "services." + k.Value
	fail := func(n *yaml.Node, sub, format string, args ...any) error {
		kk := key
		if sub != "" {
			kk += "." + sub
		}
		return &task.FieldError{Pos: task.Pos{File: path, Line: n.Line, Key: kk}, Msg: fmt.Sprintf(format, args...)}
	}
	if v.Kind != yaml.MappingNode {
		return nil, nil, fail(v, "", "is not a mapping of service settings")
	}
	s := &Service{Name: k.Value, Line: k.Line}
	if s.Name != "main" && !validHost(s.Name) {
		return nil, nil, fail(k, "", "%q is not a host name the sandbox can resolve (lower-case letters, digits, hyphens): rename the service, e.g. %q", s.Name, hostName(s.Name))
	}
	if err := v.Decode(&s.Raw); err != nil {
		return nil, nil, fail(v, "", "%v", err)
	}
	var warns []string
	for i := 0; i+1 < len(v.Content); i += 2 {
		kn, vn := v.Content[i], v.Content[i+1]
		switch kn.Value {
		case "extends":
			return nil, nil, fail(kn, "extends", "takes its settings from another service or file, which adapt does not read: write them into the service")
		case "image":
			s.Image = vn.Value
		case "build":
			b, err := parseBuild(dir, vn)
			if err != nil {
				return nil, nil, fail(vn, "build", "%v", err)
			}
			s.Build = b
		case "expose", "ports":
			if vn.Kind != yaml.SequenceNode {
				return nil, nil, fail(vn, kn.Value, "is not a list")
			}
			for _, pn := range vn.Content {
				port, udp, err := containerPort(kn.Value, pn)
				if err != nil {
					return nil, nil, fail(pn, kn.Value, "%v", err)
				}
				switch {
				case udp:
					warns = append(warns, fmt.Sprintf("%s:%d: %s: UDP port %d is not offered inside the sandbox (peers are TCP)", path, pn.Line, key, port))
				case s.Port == 0:
					s.Port = port
				case port != s.Port:
					warns = append(warns, fmt.Sprintf("%s:%d: %s: port %d is not offered inside the sandbox: a peer has one port, and %d came first", path, pn.Line, key, port, s.Port))
				}
			}
		case "environment":
			env, err := composeEnv(vn)
			if err != nil {
				return nil, nil, fail(vn, "environment", "%v", err)
			}
			s.Env = env
		}
	}
	return s, warns, nil
}

func parseBuild(dir string, n *yaml.Node) (*Build, error) {
	b := &Build{Dockerfile: "Dockerfile"}
	ctx := "."
	switch n.Kind {
	case yaml.ScalarNode:
		ctx = n.Value
	case yaml.MappingNode:
		var raw struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
			Args       any    `yaml:"args"`
		}
		if err := n.Decode(&raw); err != nil {
			return nil, err
		}
		if raw.Context != "" {
			ctx = raw.Context
		}
		if raw.Dockerfile != "" {
			b.Dockerfile = raw.Dockerfile
		}
		args, err := stringMap(raw.Args)
		if err != nil {
			return nil, fmt.Errorf("args: %v", err)
		}
		b.Args = args
	default:
		return nil, fmt.Errorf("is neither a path nor a mapping with context:")
	}
	if strings.Contains(ctx, "://") || strings.HasPrefix(ctx, "git@") {
		return nil, fmt.Errorf("context %q is remote: adapt builds only from the task's environment/ directory", ctx)
	}
	// ${CONTEXT_DIR} makes an absolute context, which Compose takes as is.
	abs := filepath.Clean(ctx)
	if !filepath.IsAbs(ctx) {
		abs = filepath.Clean(filepath.Join(dir, ctx))
	}
	if !within(abs, dir) {
		return nil, fmt.Errorf("context %q leaves environment/: a task's images are built from its environment/ directory only", ctx)
	}
	b.Context = abs
	return b, nil
}

// containerPort reads one expose: or ports: entry and returns the port inside
// the service's container: "6379", 6379, "6379/tcp", "8080:80",
// "127.0.0.1:8080:80/udp", or the long form {target: 80, protocol: tcp}.
// A range gives its first port.
func containerPort(field string, n *yaml.Node) (port int, udp bool, err error) {
	var spec, proto string
	switch n.Kind {
	case yaml.ScalarNode:
		spec = n.Value
	case yaml.MappingNode:
		var long struct {
			Target   any    `yaml:"target"`
			Protocol string `yaml:"protocol"`
		}
		if err := n.Decode(&long); err != nil {
			return 0, false, err
		}
		spec, proto = fmt.Sprint(long.Target), long.Protocol
		if long.Target == nil {
			return 0, false, fmt.Errorf("a long-form port needs target:")
		}
	default:
		return 0, false, fmt.Errorf("is not a port")
	}
	if p, pr, ok := strings.Cut(spec, "/"); ok {
		spec, proto = p, pr
	}
	if field == "ports" {
		if i := strings.LastIndex(spec, ":"); i >= 0 {
			spec = spec[i+1:]
		}
	}
	if lo, _, ok := strings.Cut(spec, "-"); ok {
		spec = lo
	}
	p, err := strconv.Atoi(strings.TrimSpace(spec))
	if err != nil || p < 1 || p > 65535 {
		return 0, false, fmt.Errorf("%q is not a port: write a number between 1 and 65535", n.Value)
	}
	return p, strings.EqualFold(proto, "udp") || strings.EqualFold(proto, "sctp"), nil
}

// composeEnv reads environment: in either form (mapping or NAME=VALUE list).
// A bare NAME (take it from the host) is left out: adapt cannot know it.
func composeEnv(n *yaml.Node) ([]string, error) {
	var out []string
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Tag == "!!null" {
				continue
			}
			out = append(out, k.Value+"="+v.Value)
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if strings.Contains(e.Value, "=") {
				out = append(out, e.Value)
			}
		}
	default:
		return nil, fmt.Errorf("is neither a mapping nor a list of NAME=VALUE")
	}
	return out, nil
}

func stringMap(v any) (map[string]string, error) {
	out := map[string]string{}
	switch m := v.(type) {
	case nil:
	case map[string]any:
		for k, val := range m {
			if val != nil {
				out[k] = fmt.Sprint(val)
			}
		}
	case []any:
		for _, e := range m {
			k, val, ok := strings.Cut(fmt.Sprint(e), "=")
			if ok {
				out[k] = val
			}
		}
	default:
		return nil, fmt.Errorf("is neither a mapping nor a list of NAME=VALUE")
	}
	return out, nil
}

// Peers are the sidecars as sandboxd.toml declares them: each offered inside
// the sandbox at its service name and first port, spliced to the same name
// and port in the compose network.
func (c *File) Peers() []task.Peer {
	var out []task.Peer
	for _, s := range c.Sidecars {
		out = append(out, task.Peer{Name: s.Name, Port: s.Port, Target: s.Name + ":" + strconv.Itoa(s.Port)})
	}
	return out
}

// SecurityOpts are the documented `docker run` options (docs/container-flags.md)
// in compose form. The profile path is relative to the emitted file, next to
// which adapt copies images/seccomp.json when it knows where that is.
var SecurityOpts = []string{"seccomp=seccomp.json", "systempaths=unconfined", "apparmor=unconfined"}

// dropFromMain are main's keys that the adapted image replaces: its image,
// and the command and entrypoint, which now belong to sandboxd serve (the
// image's own entrypoint runs inside the sandbox).
var dropFromMain = map[string]bool{"build": true, "image": true, "command": true, "entrypoint": true, "pull_policy": true}

// Emit renders the compose file that runs the adapted task: main is the
// task's image with the security options and the agents' keys passed by
// value; each sidecar is as the task wrote it, its build: replaced by the
// image adapt built (sidecarImages, by service name).
func (c *File) Emit(taskImage string, sidecarImages map[string]string, header string) ([]byte, error) {
	// What the task wrote is already interpolated; every $ left in it is
	// literal, and the emitted file is interpolated again when it is run.
	main := map[string]any{}
	if c.Main != nil {
		for k, v := range c.Main.Raw {
			if !dropFromMain[k] {
				main[k] = escapeDollars(v)
			}
		}
	}
	main["image"] = taskImage
	opts := append([]any{}, toAnyList(main["security_opt"])...)
	for _, o := range SecurityOpts {
		opts = append(opts, o)
	}
	main["security_opt"] = opts
	env := map[string]any{}
	switch e := main["environment"].(type) {
	case map[string]any:
		env = e
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			env[k] = v
		}
	}
	// Keys come in by value, never by a mounted home: a shared ~/.ssh leaks
	// between trials (docs/failures.md#key-material-never-inside-the-sandbox).
	env["SANDBOXD_AUTHORIZED_KEYS"] = "${SANDBOXD_AUTHORIZED_KEYS:?export the agents' public keys}"
	main["environment"] = env
	var deps []any
	for _, s := range c.Sidecars {
		deps = append(deps, s.Name)
	}
	if len(deps) > 0 && main["depends_on"] == nil {
		main["depends_on"] = deps
	}

	services := &yaml.Node{Kind: yaml.MappingNode}
	add := func(name string, v any) error {
		var n yaml.Node
		if err := n.Encode(v); err != nil {
			return fmt.Errorf("emit compose service %s: %w", name, err)
		}
		services.Content = append(services.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, &n)
		return nil
	}
	if err := add("main", main); err != nil {
		return nil, err
	}
	for _, s := range c.Sidecars {
		svc := map[string]any{}
		for k, v := range s.Raw {
			svc[k] = escapeDollars(v)
		}
		if s.Build != nil {
			delete(svc, "build")
			svc["image"] = sidecarImages[s.Name]
		}
		if err := add(s.Name, svc); err != nil {
			return nil, err
		}
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "services"}, services)
	for _, k := range []string{"volumes", "networks"} {
		if v, ok := c.Extra[k]; ok {
			var n yaml.Node
			if err := n.Encode(escapeDollars(v)); err != nil {
				return nil, fmt.Errorf("emit compose %s: %w", k, err)
			}
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &n)
		}
	}
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("emit compose file: %w", err)
	}
	return buf.Bytes(), enc.Close()
}

// escapeDollars writes every $ of the strings in v as $$, so that Compose
// reads back the value adapt read.
func escapeDollars(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "$", "$$")
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = escapeDollars(e)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(x))
		for k, e := range x {
			out[k] = escapeDollars(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = escapeDollars(e)
		}
		return out
	}
	return v
}

// Digest is a hash of what the file makes of every task that shares it
// (sidecars, main's settings but its image, the top-level volumes and
// networks), after interpolation: two tasks whose [environment].env make
// their compose files differ do not share an image.
func (c *File) Digest() string {
	h := sha256.New()
	if c.Main != nil {
		main := map[string]any{}
		for k, v := range c.Main.Raw {
			if !dropFromMain[k] {
				main[k] = v
			}
		}
		fmt.Fprintf(h, "main %v\n", main)
	}
	for _, s := range c.Sidecars {
		fmt.Fprintf(h, "service %s %v\n", s.Name, s.Raw)
	}
	fmt.Fprintf(h, "extra %v\n", c.Extra)
	return hex.EncodeToString(h.Sum(nil))
}

// interpolateNode interpolates every scalar value under n (never a key), as
// Compose does before it reads the file. key is n's place, for messages;
// warned holds the names already reported unset.
func interpolateNode(path, key string, n *yaml.Node, lookup Lookup, warned map[string]bool) ([]string, error) {
	var warns []string
	sub := func(k string, child *yaml.Node) error {
		w, err := interpolateNode(path, k, child, lookup, warned)
		warns = append(warns, w...)
		return err
	}
	join := func(k string) string {
		if key == "" {
			return k
		}
		return key + "." + k
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := sub(join(n.Content[i].Value), n.Content[i+1]); err != nil {
				return nil, err
			}
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			if err := sub(fmt.Sprintf("%s[%d]", key, i), e); err != nil {
				return nil, err
			}
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return nil, nil
		}
		v, unset, err := Interpolate(n.Value, lookup)
		if err != nil {
			return nil, &task.FieldError{Pos: task.Pos{File: path, Line: n.Line, Key: key}, Msg: err.Error()}
		}
		for _, u := range unset {
			if !warned[u] {
				warned[u] = true
				warns = append(warns, fmt.Sprintf("%s:%d: %s: ${%s} is not set (not a Harbor variable, not in [environment].env or environment/.env): it is the empty string, as Compose makes it", path, n.Line, key, u))
			}
		}
		n.Value = v
	}
	return warns, nil
}

func toAnyList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return nil
}

func yamlErrLine(err error) int {
	var line int
	if _, e := fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &line); e == nil {
		return line
	}
	return 0
}

func validHost(n string) bool {
	if n == "" || n == "localhost" || len(n) > 63 {
		return false
	}
	for i, c := range n {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(n)-1:
		default:
			return false
		}
	}
	return true
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// hostName suggests a name that validHost takes for a service it refuses:
// lower case, every run of other characters one hyphen, none at either end,
// at most 63 characters.
func hostName(s string) string {
	parts := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
	h := strings.Join(parts, "-")
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-")
	}
	if h == "" || h == "localhost" {
		return "sidecar"
	}
	return h
}
