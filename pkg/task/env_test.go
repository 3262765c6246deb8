package task

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hostEnv(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// TestTemplate pins Harbor's resolve_env_vars rule: only a value that is
// exactly ${NAME} or ${NAME:-default} is a template.
func TestTemplate(t *testing.T) {
	tests := []struct {
		value, name, def string
		hasDef, ok       bool
	}{
		{"${HOME}", "HOME", "", false, true},
		{"${LOG_LEVEL:-info}", "LOG_LEVEL", "info", true, true},
		{"${X:-}", "X", "", true, true},
		{"${X:-a:-b}", "X", "a:-b", true, true},
		{"${X:-a}b}", "X", "a}b", true, true},
		{"${X:-${Y}}", "X", "${Y}", true, true},
		{"${A B}", "A B", "", false, true},
		{"plain", "", "", false, false},
		{"prefix-${X}", "", "", false, false},
		{"${X}-suffix", "", "", false, false},
		{"${X:default}", "", "", false, false},
		{"${:-x}", "", "", false, false},
		{"${}", "", "", false, false},
		{"$X", "", "", false, false},
		{"${X}y}", "", "", false, false},
		{"${X:-a\nb}", "", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			name, def, hasDef, ok := template(tt.value)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.name, name)
			assert.Equal(t, tt.def, def)
			assert.Equal(t, tt.hasDef, hasDef)
		})
	}
}

// TestExpandEnv: whole-value templates as Harbor's resolve_env_vars reads
// them, references embedded in longer values and several in one value;
// a reference with neither a host value nor a default is an error that
// names the variable (Harbor refuses the run: "not found in host
// environment"), and text that is no reference stays literal.
func TestExpandEnv(t *testing.T) {
	src := `[environment.env]
LOG_LEVEL = "${LOG_LEVEL:-info}"
TOKEN = "${TOKEN}"
URL = "https://${HOST:-example.com}:${PORT:-443}/v1"
EMBEDDED = "a-${B}-z"
LITERAL = "cost $5, ${:-y}, ${X:y}, ${open"
EMPTY_DEFAULT = "${NOPE:-}"
`
	tests := []struct {
		name    string
		host    map[string]string
		want    Env
		wantErr []string
	}{
		{"defaults before any host", nil,
			Env{{"LOG_LEVEL", "info"}, {"TOKEN", ""}, {"URL", "https://example.com:443/v1"}, {"EMBEDDED", "a--z"},
				{"LITERAL", "cost $5, ${:-y}, ${X:y}, ${open"}, {"EMPTY_DEFAULT", ""}},
			[]string{
				`task.toml:3: environment.env.TOKEN: TOKEN needs TOKEN from the host, and it is not set: set TOKEN in sandboxd's environment, or write ${TOKEN:-default} in the value`,
				`task.toml:5: environment.env.EMBEDDED: EMBEDDED needs B from the host, and it is not set: set B in sandboxd's environment, or write ${B:-default} in the value`,
			}},
		{"host values win over defaults, in every reference", map[string]string{"LOG_LEVEL": "debug", "TOKEN": "s3cret", "B": "b", "PORT": "8443"},
			Env{{"LOG_LEVEL", "debug"}, {"TOKEN", "s3cret"}, {"URL", "https://example.com:8443/v1"}, {"EMBEDDED", "a-b-z"},
				{"LITERAL", "cost $5, ${:-y}, ${X:y}, ${open"}, {"EMPTY_DEFAULT", ""}}, nil},
		{"a host variable set to empty counts as set", map[string]string{"LOG_LEVEL": "", "TOKEN": "", "B": "", "HOST": ""},
			Env{{"LOG_LEVEL", ""}, {"TOKEN", ""}, {"URL", "https://:443/v1"}, {"EMBEDDED", "a--z"},
				{"LITERAL", "cost $5, ${:-y}, ${X:y}, ${open"}, {"EMPTY_DEFAULT", ""}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := parse(t, src)
			err := tk.ExpandEnv(hostEnv(tt.host))
			if tt.wantErr == nil {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Equal(t, strings.Join(tt.wantErr, "\n"), err.Error())
				assert.ErrorIs(t, err, ErrInvalid)
			}
			assert.Equal(t, tt.want, tk.EnvironmentEnv())
			assert.Equal(t, tt.want, tk.AgentEnv())
			assert.Equal(t, tt.want, tk.VerifierEnv())
			assert.Equal(t, tt.want, tk.SolutionEnv())
		})
	}
}

// TestRefs pins what counts as a reference inside a longer value.
func TestRefs(t *testing.T) {
	tests := []struct {
		value string
		want  []string // name or name:-default, in order
	}{
		{"prefix-${X}-suffix", []string{"X"}},
		{"${A}${B:-b}", []string{"A", "B:-b"}},
		{"${A:-x}y}", []string{"A:-x"}},
		{"$X ${ ${Y}", []string{" ${Y"}},
		{"${:-x}${Z}", []string{"Z"}},
		{"${X:y}", nil},
		{"${open", nil},
		{"plain", nil},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			var got []string
			for _, r := range refs(tt.value) {
				if r.hasDef {
					got = append(got, r.name+":-"+r.def)
				} else {
					got = append(got, r.name)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestExpandEnv_KeepsTheWrittenValues(t *testing.T) {
	tk := parse(t, "[environment.env]\nKEY = \"${KEY}\"\n")
	require.NoError(t, tk.ExpandEnv(hostEnv(map[string]string{"KEY": "secret"})))
	assert.Equal(t, Env{{"KEY", "${KEY}"}}, tk.Environment.Env, "adapt records templates, never host secrets")
	assert.Equal(t, Env{{"KEY", "secret"}}, tk.AgentEnv())
}

func TestPhaseEnv_FileOrderAndOverrideInPlace(t *testing.T) {
	src := `[environment.env]
Z = "base-z"
MODE = "base"
A = "base-a"

[agent.env]
MODE = "agent"
NEW = "agent-new"

[verifier]
env = { B = "v-b", MODE = "verify" }

[solution.env]
A = "oracle-a"
`
	tk := parse(t, src)
	assert.Equal(t, []string{"Z=base-z", "MODE=agent", "A=base-a", "NEW=agent-new"}, tk.AgentEnv().Environ())
	assert.Equal(t, []string{"Z=base-z", "MODE=verify", "A=base-a", "B=v-b"}, tk.VerifierEnv().Environ())
	assert.Equal(t, []string{"Z=base-z", "MODE=base", "A=oracle-a"}, tk.SolutionEnv().Environ())
	assert.Equal(t, []string{"Z", "MODE", "A"}, tk.EnvironmentEnv().Names())
	v, ok := tk.VerifierEnv().Lookup("MODE")
	assert.True(t, ok)
	assert.Equal(t, "verify", v)
	_, ok = tk.VerifierEnv().Lookup("NEW")
	assert.False(t, ok)
}

// TestVerifierEnvNeverIncludesAgentEnv: the verifier gets environment.env +
// verifier.env and never agent.env, whatever the host or the names
// (docs/failures.md#verifier-environment-is-its-own).
func TestVerifierEnvNeverIncludesAgentEnv(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"agent-only variables stay with the agent",
			"[agent.env]\nAGENT_SECRET = \"s\"\nANTHROPIC_API_KEY = \"${ANTHROPIC_API_KEY}\"\n",
			nil},
		{"an agent override does not leak into the verifier",
			"[environment.env]\nMODE = \"base\"\n[agent.env]\nMODE = \"agent\"\n",
			[]string{"MODE=base"}},
		{"the verifier's own value wins over the environment's, the agent's is absent",
			"[environment.env]\nMODE = \"base\"\n[agent.env]\nMODE = \"agent\"\nONLY_AGENT = \"1\"\n[verifier.env]\nMODE = \"verify\"\n",
			[]string{"MODE=verify"}},
		{"the fixture with every section", "", nil}, // filled from schema-1.3 below
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tk *Task
			if tt.src == "" {
				var err error
				tk, err = Load(fixture("schema-1.3"))
				require.NoError(t, err)
				tt.want = []string{"LOG_LEVEL=info", "MODE=grade", "LITERAL=prefix-x-info-suffix", "REPORT=/logs/verifier/report.json"}
			} else {
				tk = parse(t, tt.src)
			}
			_ = tk.ExpandEnv(hostEnv(map[string]string{"ANTHROPIC_API_KEY": "sk-agent"}))
			assert.Equal(t, tt.want, nilIfEmpty(tk.VerifierEnv().Environ()))
			verifier := map[string]bool{}
			for _, name := range tk.VerifierEnv().Names() {
				verifier[name] = true
			}
			for _, a := range tk.Agent.Env {
				_, inBase := tk.Environment.Env.Lookup(a.Name)
				_, inOwn := tk.Verifier.Env.Lookup(a.Name)
				if !inBase && !inOwn {
					assert.False(t, verifier[a.Name], "agent.env %s reached the verifier", a.Name)
				}
			}
			for _, v := range tk.VerifierEnv() {
				assert.NotEqual(t, "sk-agent", v.Value, "the agent's host-filled key reached the verifier")
				if agentValue, ok := tk.Agent.Env.Lookup(v.Name); ok {
					assert.NotEqual(t, agentValue, v.Value, "%s carries the agent's value", v.Name)
				}
			}
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
