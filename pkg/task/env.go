package task

import (
	"errors"
	"fmt"
	"strings"
)

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string
	Value string
}

// Env is an ordered list of environment variables with unique names.
type Env []EnvVar

// Lookup returns the value of name and whether it is set.
func (e Env) Lookup(name string) (string, bool) {
	for _, v := range e {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}

// Environ returns the list as NAME=VALUE strings, for exec and env -i.
func (e Env) Environ() []string {
	out := make([]string, len(e))
	for i, v := range e {
		out[i] = v.Name + "=" + v.Value
	}
	return out
}

// Names returns the variable names in order.
func (e Env) Names() []string {
	out := make([]string, len(e))
	for i, v := range e {
		out[i] = v.Name
	}
	return out
}

// merge lays the layers over each other: a later layer's variable replaces an
// earlier one's value in place (where Python's {**a, **b} keeps it), a new name
// goes at the end. Every layer is in file order, so the result is deterministic.
func merge(layers ...Env) Env {
	var out Env
	index := map[string]int{}
	for _, l := range layers {
		for _, v := range l {
			if i, ok := index[v.Name]; ok {
				out[i].Value = v.Value
				continue
			}
			index[v.Name] = len(out)
			out = append(out, v)
		}
	}
	return out
}

// template recognises a value that is exactly "${NAME}" or "${NAME:-default}",
// matching Harbor's resolve_env_vars (the regex \$\{([^}:]+)(?::-(.*))?\} in
// full-match mode): the default of a whole-value template runs to the
// value's last "}".
func template(v string) (name, def string, hasDef, ok bool) {
	if len(v) < 4 || !strings.HasPrefix(v, "${") || !strings.HasSuffix(v, "}") {
		return "", "", false, false
	}
	inner := v[2 : len(v)-1]
	i := strings.IndexAny(inner, "}:")
	switch {
	case i < 0:
		return inner, "", false, true
	case i == 0 || inner[i] == '}':
		return "", "", false, false
	case !strings.HasPrefix(inner[i:], ":-"):
		return "", "", false, false
	}
	def = inner[i+2:]
	if strings.ContainsRune(def, '\n') { // Python's "." stops at a newline
		return "", "", false, false
	}
	return inner[:i], def, true, true
}

// ref is one "${NAME}" or "${NAME:-default}" inside a longer value, at
// v[start:end].
type ref struct {
	start, end int
	name, def  string
	hasDef     bool
}

// refs finds the references of a value that is not one whole template:
// each "${NAME}" or "${NAME:-default}" in it, left to right, where a
// default ends at the first "}" (the same pattern as template's, searched
// rather than full-matched). Anything else — a "$" alone, "${" with no
// "}", "${:-x}", "${X:y}" — is literal text, as it is to Harbor.
func refs(v string) []ref {
	var out []ref
	for off := 0; ; {
		i := strings.Index(v[off:], "${")
		if i < 0 {
			return out
		}
		start := off + i
		closing := strings.IndexByte(v[start+2:], '}')
		if closing < 0 {
			return out
		}
		end := start + 2 + closing + 1
		inner := v[start+2 : end-1]
		name, def, hasDef := inner, "", false
		if c := strings.IndexByte(inner, ':'); c >= 0 {
			name, def, hasDef = inner[:c], strings.TrimPrefix(inner[c:], ":-"), true
			if !strings.HasPrefix(inner[c:], ":-") {
				name = "" // ${X:y} is no reference
			}
		}
		if name == "" || strings.ContainsRune(def, '\n') {
			off = start + 2
			continue
		}
		out = append(out, ref{start: start, end: end, name: name, def: def, hasDef: hasDef})
		off = end
	}
}

// needsHost reports the names a value takes from the host with no
// default: the ones a missing host variable leaves unresolved.
func needsHost(v string) []string {
	if name, _, hasDef, ok := template(v); ok {
		if hasDef {
			return nil
		}
		return []string{name}
	}
	var out []string
	for _, r := range refs(v) {
		if !r.hasDef {
			out = append(out, r.name)
		}
	}
	return out
}

// expandValue resolves one value: a whole template as Harbor resolves it,
// else each reference in it. It returns the names that lookup did not find
// and that had no default; each becomes "".
func expandValue(v string, lookup func(string) (string, bool)) (string, []string) {
	one := func(name, def string, hasDef bool, missing *[]string) string {
		if hv, found := lookup(name); found {
			return hv
		}
		if !hasDef {
			*missing = append(*missing, name)
		}
		return def
	}
	var missing []string
	if name, def, hasDef, ok := template(v); ok {
		return one(name, def, hasDef, &missing), missing
	}
	rs := refs(v)
	if len(rs) == 0 {
		return v, nil
	}
	var b strings.Builder
	last := 0
	for _, r := range rs {
		b.WriteString(v[last:r.start])
		b.WriteString(one(r.name, r.def, r.hasDef, &missing))
		last = r.end
	}
	b.WriteString(v[last:])
	return b.String(), missing
}

// expand resolves every reference of one env table. A variable that is
// neither set on the host nor given a default becomes "" and is reported:
// Harbor refuses such a run ("not found in host environment"), and so do
// serve and trial.
func expand(e Env, at map[string]Pos, lookup func(string) (string, bool)) (Env, []error) {
	out := make(Env, len(e))
	var errs []error
	for i, v := range e {
		out[i] = v
		val, missing := expandValue(v.Value, lookup)
		out[i].Value = val
		for _, name := range missing {
			errs = append(errs, &FieldError{Pos: at[v.Name], Msg: fmt.Sprintf(
				"%s needs %s from the host, and it is not set: set %s in sandboxd's environment, or write ${%s:-default} in the value",
				v.Name, name, name, name)})
		}
	}
	return out, errs
}

// noHost is the lookup of a task that has not been given a host environment.
func noHost(string) (string, bool) { return "", false }

// ExpandEnv fills the phase environments from the env tables, resolving
// "${VAR}" and "${VAR:-default}", whole values or embedded ones, with lookup (os.LookupEnv for the host's
// environment). Until it is called, Parse and Load have resolved them against
// an empty host: defaults apply and required variables are "". It reports every
// required variable lookup does not find; the lists are complete either way.
func (t *Task) ExpandEnv(lookup func(string) (string, bool)) error {
	var errs []error
	x := func(e Env, key string) Env {
		out, es := expand(e, t.envPos[key], lookup)
		errs = append(errs, es...)
		return out
	}
	base := x(t.Environment.Env, "environment.env")
	agent := x(t.Agent.Env, "agent.env")
	verifier := x(t.Verifier.Env, "verifier.env")
	solution := x(t.Solution.Env, "solution.env")
	t.baseEnv = base
	t.agentEnv = merge(base, agent)
	t.verifierEnv = merge(base, verifier)
	t.solutionEnv = merge(base, solution)
	return errors.Join(errs...)
}

// EnvironmentEnv is environment.env, expanded: what every process of the task
// gets on top of the image's ENV (the entrypoint and the healthcheck get only this).
func (t *Task) EnvironmentEnv() Env { return t.baseEnv }

// AgentEnv is environment.env then agent.env, expanded, in file order; a name
// in agent.env overrides the same name of environment.env in place. The
// daemon puts the image's ENV beneath it.
func (t *Task) AgentEnv() Env { return t.agentEnv }

// VerifierEnv is environment.env then verifier.env, expanded, in file order.
// It never contains agent.env (docs/failures.md#verifier-environment-is-its-own):
// the agent's variables are the agent's, and the verifier must not depend on
// them.
func (t *Task) VerifierEnv() Env { return t.verifierEnv }

// SolutionEnv is environment.env then solution.env, expanded, for the oracle
// agent that runs solution/solve.sh.
func (t *Task) SolutionEnv() Env { return t.solutionEnv }
