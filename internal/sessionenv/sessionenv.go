// Package sessionenv makes the exact environment of a process sandboxd
// starts in the sandbox (a session, the entrypoint, the verifier, a
// healthcheck): nothing of the daemon's own environment is in it.
package sessionenv

import (
	"strings"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// Make is a session's exact environment: the image's ENV (PATH defaults
// to Docker's), HOME from the user's passwd entry as Docker sets it, the
// task's variables for the phase, then the request's own. Nothing of the
// daemon's environment is in it
// (docs/failures.md#harness-variables-stay-out-of-sessions); a task's
// variable arrives intact whatever its name, and a non-root agent still gets
// the image's ENV (docs/failures.md#non-root-agent-keeps-the-image-env).
func Make(image, task []string, u idmap.User, extra []string) []string {
	var env envList
	env.set("PATH", childproc.DefaultPath)
	env.set("HOSTNAME", "sandbox")
	for _, kv := range image {
		env.add(kv)
	}
	env.set("HOME", u.Home)
	if u.Name != "" {
		env.setDefault("USER", u.Name)
		env.setDefault("LOGNAME", u.Name)
	}
	for _, kv := range task {
		env.add(kv)
	}
	for _, kv := range extra {
		env.add(kv)
	}
	return env.list()
}

// envList keeps the first position of each name and the last value.
type envList struct {
	keys []string
	vals map[string]string
}

func (e *envList) set(k, v string) {
	if e.vals == nil {
		e.vals = map[string]string{}
	}
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}

func (e *envList) setDefault(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.set(k, v)
	}
}

func (e *envList) add(kv string) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return
	}
	e.set(k, v)
}

func (e *envList) list() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}
