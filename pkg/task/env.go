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
// full-match mode). Values with a template inside other text are literal, in
// Harbor and here.
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

// expand resolves every template of one env table. A variable that is neither
// set on the host nor given a default becomes "" and is reported.
func expand(e Env, at map[string]Pos, lookup func(string) (string, bool)) (Env, []error) {
	out := make(Env, len(e))
	var errs []error
	for i, v := range e {
		out[i] = v
		name, def, hasDef, ok := template(v.Value)
		if !ok {
			continue
		}
		if hv, found := lookup(name); found {
			out[i].Value = hv
			continue
		}
		out[i].Value = def
		if !hasDef {
			errs = append(errs, &FieldError{Pos: at[v.Name], Msg: fmt.Sprintf(
				"%s needs %s from the host, and it is not set: set %s in sandboxd's environment, or write %s = \"${%s:-default}\"",
				v.Name, name, name, v.Name, name)})
		}
	}
	return out, errs
}

// noHost is the lookup of a task that has not been given a host environment.
func noHost(string) (string, bool) { return "", false }

// ExpandEnv fills the phase environments from the env tables, resolving
// "${VAR}" and "${VAR:-default}" values with lookup (os.LookupEnv for the host's
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
