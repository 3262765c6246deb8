package compose

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/pkg/task"
)

// Vars are what a task's compose file is interpolated with, in Harbor's
// order: its infrastructure variables win over the task's [environment].env,
// which wins over environment/.env (Compose's own file, which loses to the
// environment Harbor runs `docker compose` in). adapt's own environment is
// left out on purpose: the image must not depend on the shell that built it.
type Vars struct {
	Infra map[string]string // HarborVars
	Task  task.Env          // [environment].env, expanded
}

// HarborVars are the variables Harbor sets for `docker compose` on a compose
// task (harbor's src/harbor/environments/docker/docker.py,
// DockerEnvironmentEnvVars), with the values adapt gives them: there is no
// trial directory at build time, so the host log paths are relative to the
// compose file adapt emits, and MAIN_IMAGE_NAME is Harbor's name for the
// task's image, which adapt recognises as main's own build (Main.HarborImage).
func HarborVars(t *task.Task) map[string]string {
	env := filepath.Join(t.Dir, "environment")
	if abs, err := filepath.Abs(env); err == nil {
		env = abs
	}
	cpus := t.Environment.CPUs
	if cpus <= 0 {
		cpus = 1
	}
	mem := t.Environment.MemoryMB
	if mem <= 0 {
		mem = 2048
	}
	v := map[string]string{
		"MAIN_IMAGE_NAME":         HarborImageName(t.Name),
		"CONTEXT_DIR":             env,
		"HOST_VERIFIER_LOGS_PATH": "./logs/verifier",
		"HOST_AGENT_LOGS_PATH":    "./logs/agent",
		"HOST_ARTIFACTS_PATH":     "./logs/artifacts",
		"ENV_VERIFIER_LOGS_PATH":  "/logs/verifier",
		"ENV_AGENT_LOGS_PATH":     "/logs/agent",
		"ENV_ARTIFACTS_PATH":      "/logs/artifacts",
		"CPUS":                    strconv.FormatFloat(cpus, 'f', -1, 64),
		"MEMORY":                  strconv.FormatInt(mem, 10) + "M",
	}
	if t.Environment.DockerImage != "" {
		v["PREBUILT_IMAGE_NAME"] = t.Environment.DockerImage
	}
	return v
}

var notImageChar = regexp.MustCompile(`[^a-z0-9._-]`)

// HarborImageName is what Harbor tags a task's image: hb__<task>, lower
// case, other characters as -, and a leading 0 when it would not start with
// a letter or digit.
func HarborImageName(taskName string) string {
	n := strings.ToLower("hb__" + taskName)
	if c := n[0]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
		n = "0" + n
	}
	return notImageChar.ReplaceAllString(n, "-")
}

// lookup resolves a name through Vars and then the .env file's entries.
func (v Vars) lookup(dotenv map[string]string) Lookup {
	return func(name string) (string, bool) {
		if val, ok := v.Infra[name]; ok {
			return val, true
		}
		if val, ok := v.Task.Lookup(name); ok {
			return val, true
		}
		val, ok := dotenv[name]
		return val, ok
	}
}

// readDotenv reads environment/.env as Compose does: NAME=VALUE lines
// (`export` before the name is allowed), # comments, single-quoted values
// literal, double-quoted ones with \n \t \" \\ escapes, unquoted ones trimmed
// and cut at " #"; unquoted and double-quoted values are interpolated with
// outer and the entries above them. A missing file is no entries.
func readDotenv(path string, outer Lookup) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &task.FieldError{Pos: task.Pos{File: path}, Msg: "cannot be read: " + err.Error(), Err: err}
	}
	out := map[string]string{}
	look := func(name string) (string, bool) {
		if v, ok := outer(name); ok {
			return v, true
		}
		v, ok := out[name]
		return v, ok
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		fail := func(format string, args ...any) error {
			return &task.FieldError{Pos: task.Pos{File: path, Line: line}, Msg: fmt.Sprintf(format, args...)}
		}
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		s = strings.TrimSpace(strings.TrimPrefix(s, "export "))
		name, val, ok := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || !validName(name) {
			return nil, fail("%q is not NAME=VALUE", s)
		}
		val = strings.TrimSpace(val)
		interpolate := true
		switch {
		case strings.HasPrefix(val, "'"):
			end := strings.IndexByte(val[1:], '\'')
			if end < 0 {
				return nil, fail("%s: the quoted value does not end on its line (multi-line values are not read): close the quote", name)
			}
			val, interpolate = val[1:1+end], false
		case strings.HasPrefix(val, `"`):
			v, err := doubleQuoted(val)
			if err != nil {
				return nil, fail("%s: %v", name, err)
			}
			val = v
		default:
			if i := strings.Index(val, " #"); i >= 0 {
				val = strings.TrimSpace(val[:i])
			}
		}
		if interpolate {
			v, _, err := Interpolate(val, look)
			if err != nil {
				return nil, fail("%s: %v", name, err)
			}
			val = v
		}
		out[name] = val
	}
	if err := sc.Err(); err != nil {
		return nil, &task.FieldError{Pos: task.Pos{File: path}, Msg: "cannot be read: " + err.Error(), Err: err}
	}
	return out, nil
}

// doubleQuoted reads a "…" value with its escapes; what follows the closing
// quote must be nothing or a comment.
func doubleQuoted(s string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			if rest := strings.TrimSpace(s[i+1:]); rest != "" && rest[0] != '#' {
				return "", fmt.Errorf("%q follows the closing quote", rest)
			}
			return b.String(), nil
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '"', '\\':
				b.WriteByte(s[i])
			default:
				b.WriteByte('\\')
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("the quoted value does not end on its line (multi-line values are not read): close the quote")
}

func validName(n string) bool {
	for i := 0; i < len(n); i++ {
		if !(i == 0 && nameStart(n[i]) || i > 0 && (nameChar(n[i]) || n[i] == '.' || n[i] == '-')) {
			return false
		}
	}
	return n != ""
}
