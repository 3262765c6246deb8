package layer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sandboxd/sandboxd/pkg/layer/engine"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Facts are the base image's config as serve needs it at run time: the
// adapted image's own ENTRYPOINT and USER are sandboxd's, so the originals are
// written down for serve to apply inside the sandbox (design: "adapt"). CMD
// is not among them: Harbor replaces it with `sleep infinity`, so it never
// runs there either.
type Facts struct {
	Entrypoint []string // ENTRYPOINT; run inside the sandbox as User at start
	User       string   // USER; "" = root
	Workdir    string   // WORKDIR; "" = /
	Env        []string // ENV, NAME=VALUE in order
}

// FactsOf reads the facts from an image's config.
func FactsOf(img *engine.Image) Facts {
	return Facts{
		Entrypoint: append([]string{}, img.Config.Entrypoint...),
		User:       img.Config.User,
		Workdir:    img.Config.WorkingDir,
		Env:        append([]string{}, img.Config.Env...),
	}
}

// EnvWarnings name the SANDBOXD_ variables the image's own ENV sets. serve
// reads its settings from SANDBOXD_ variables, and the adapted image keeps
// the base's ENV: such a variable would configure serve in every run of
// the image, unseen by whoever runs it.
func (f Facts) EnvWarnings() []string {
	var out []string
	for _, kv := range f.Env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SANDBOXD_") {
			out = append(out, fmt.Sprintf("the image's ENV sets %s: sandboxd serve takes SANDBOXD_ variables as its settings, so it would apply to every run of the adapted image; remove it from the image and give it at run time (docker run -e %s=...) if it is meant", name, name))
		}
	}
	return out
}

// sandboxdFile is sandboxd.toml as adapt writes it (see pkg/task's doc for
// the schema). Field order is the order in the file. The image keys are
// pointers so that a file can leave them out (the --out route, where the
// build script fills them from the base it builds) yet still say
// `entrypoint = []`.
type sandboxdFile struct {
	Listen           string     `toml:"listen,omitempty"`
	AuthorizedKeys   string     `toml:"authorized_keys,omitempty"`
	EgressAllowCIDRs []string   `toml:"egress_allow_cidrs,omitempty"`
	Entrypoint       *[]string  `toml:"entrypoint,omitempty"`
	ImageUser        *string    `toml:"image_user,omitempty"`
	ImageWorkdir     *string    `toml:"image_workdir,omitempty"`
	ImageEnv         *[]string  `toml:"image_env,omitempty"`
	Peers            []peerFile `toml:"peers,omitempty"`
}

type peerFile struct {
	Name   string `toml:"name"`
	Port   int    `toml:"port"`
	Target string `toml:"target"`
}

const sandboxdHeader = "# Written by sandboxd adapt: the base image's config (entrypoint, image_*),\n" +
	"# which the adapted image replaces with sandboxd's own, for serve to apply\n" +
	"# inside the sandbox; merged with the task's own sandboxd.toml.\n"

// SandboxdTOML renders the sandboxd.toml baked next to a task: the task's own
// sandboxd.toml (if any) merged with the image facts, main's compose
// environment (extraEnv, laid over the image's ENV as compose does) and the
// compose peers. A key the task's own file writes wins over the fact, since a
// task author who wrote entrypoint = [] meant it; peers are the task's plus
// the compose file's, and a name declared by both is an error. keysFile, when
// not "", is the name the task's authorized_keys file is copied under.
func SandboxdTOML(t *task.Task, f Facts, extraEnv []string, peers []task.Peer, keysFile string) ([]byte, error) {
	out, own, err := ownSandboxd(t, peers, keysFile)
	if err != nil {
		return nil, err
	}
	ep, user, wd, env := nonNil(f.Entrypoint), f.User, f.Workdir, mergeEnv(f.Env, extraEnv)
	if !own["entrypoint"] {
		out.Entrypoint = &ep
	}
	if !own["image_user"] {
		out.ImageUser = &user
	}
	if !own["image_workdir"] && wd != "" {
		out.ImageWorkdir = &wd
	}
	if !own["image_env"] {
		out.ImageEnv = &env
	}
	var buf bytes.Buffer
	buf.WriteString(sandboxdHeader)
	if err := toml.NewEncoder(&buf).Encode(out); err != nil {
		return nil, fmt.Errorf("write sandboxd.toml for task %s: %w", t.Name, err)
	}
	// The result must read back as the task package reads it, or serve would
	// refuse the image at start instead of adapt refusing it now.
	if _, _, err := task.ParseSandboxd("sandboxd.toml", buf.Bytes()); err != nil {
		return nil, fmt.Errorf("task %s: the merged sandboxd.toml does not parse: %w", t.Name, err)
	}
	return buf.Bytes(), nil
}

// SandboxdTemplate is SandboxdTOML for a base adapt cannot inspect (--out):
// rest is the file without the image facts, and tmpl is a Go template for
// `docker image inspect --format` that prints the facts the task's own file
// does not set, as TOML lines to put before rest. The template's json
// function quotes strings in a form TOML reads; image_env lists the image's
// ENV then extraEnv, and sandboxd.toml's reader lets a later NAME replace an
// earlier one in place, which is the merge SandboxdTOML does.
func SandboxdTemplate(t *task.Task, extraEnv []string, peers []task.Peer, keysFile string) (rest []byte, tmpl string, err error) {
	out, own, err := ownSandboxd(t, peers, keysFile)
	if err != nil {
		return nil, "", err
	}
	var b strings.Builder
	b.WriteString(sandboxdHeader)
	if !own["entrypoint"] {
		b.WriteString("entrypoint = [{{range $i, $e := .Config.Entrypoint}}{{if $i}}, {{end}}{{json $e}}{{end}}]\n")
	}
	if !own["image_user"] {
		b.WriteString("image_user = {{json .Config.User}}\n")
	}
	if !own["image_workdir"] {
		b.WriteString("{{if .Config.WorkingDir}}image_workdir = {{json .Config.WorkingDir}}\n{{end}}")
	}
	if !own["image_env"] {
		b.WriteString("image_env = [{{range $i, $e := .Config.Env}}{{if $i}}, {{end}}{{json $e}}{{end}}")
		for i, kv := range extraEnv {
			if i == 0 {
				b.WriteString("{{if .Config.Env}}, {{end}}")
			} else {
				b.WriteString(", ")
			}
			q, _ := json.Marshal(kv)
			b.Write(q)
		}
		b.WriteString("]\n")
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(out); err != nil {
		return nil, "", fmt.Errorf("write sandboxd.toml for task %s: %w", t.Name, err)
	}
	rest = buf.Bytes()
	// The encoder puts a blank line between keys and a first table; rest
	// alone has no keys before its [[peers]], the whole file may.
	if b.Len() > len(sandboxdHeader) && bytes.HasPrefix(rest, []byte("[")) {
		rest = append([]byte("\n"), rest...)
	}
	return rest, b.String(), nil
}

// ownSandboxd is the task's own sandboxd.toml as adapt carries it, plus the
// peers, and which keys the task's file writes.
func ownSandboxd(t *task.Task, peers []task.Peer, keysFile string) (sandboxdFile, map[string]bool, error) {
	own := map[string]bool{}
	sb := t.Sandboxd
	var out sandboxdFile
	if t.SandboxdFile != "" {
		data, err := os.ReadFile(t.SandboxdFile)
		if err != nil {
			return out, nil, fmt.Errorf("read %s: %w", t.SandboxdFile, err)
		}
		var m map[string]any
		if _, err := toml.Decode(string(data), &m); err == nil {
			for k := range m {
				own[k] = true
			}
		}
	}
	out.Listen = sb.Listen
	if own["entrypoint"] {
		ep := nonNil(sb.Entrypoint)
		out.Entrypoint = &ep
	}
	if own["image_user"] {
		out.ImageUser = &sb.ImageUser
	}
	if own["image_workdir"] && sb.ImageWorkdir != "" {
		out.ImageWorkdir = &sb.ImageWorkdir
	}
	if own["image_env"] {
		env := nonNil(sb.ImageEnv.Environ())
		out.ImageEnv = &env
	}
	if sb.AuthorizedKeys != "" {
		out.AuthorizedKeys = keysFile
	}
	for _, p := range sb.EgressAllowCIDRs {
		out.EgressAllowCIDRs = append(out.EgressAllowCIDRs, p.String())
	}
	seen := map[string]bool{}
	for _, p := range append(append([]task.Peer{}, sb.Peers...), peers...) {
		if seen[p.Name] {
			return out, nil, fmt.Errorf("task %s: peer %q is declared both in sandboxd.toml and as a compose service: remove one", t.Name, p.Name)
		}
		seen[p.Name] = true
		out.Peers = append(out.Peers, peerFile{Name: p.Name, Port: p.Port, Target: p.Target})
	}
	return out, own, nil
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// mergeEnv lays extra over base: a later NAME replaces the earlier value in
// place, a new one goes at the end (as Docker applies ENV and compose's
// environment: over an image's).
func mergeEnv(base, extra []string) []string {
	out := append([]string{}, base...)
	index := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}
