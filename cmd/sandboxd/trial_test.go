package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trial's run-time hosts take their SANDBOXD_ variables as serve's
// settings do: a comma-separated list, which a flag given overrides.
func TestTrialRuntimeHostsFromEnv(t *testing.T) {
	env := map[string]string{
		"SANDBOXD_ALLOW_AGENT_HOST":       "api.anthropic.com, api.openai.com",
		"SANDBOXD_ALLOW_ENVIRONMENT_HOST": "pypi.org",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		args        []string
		agent, envs []string
	}{
		{nil, []string{"api.anthropic.com", "api.openai.com"}, []string{"pypi.org"}},
		{[]string{"--allow-agent-host", "example.com"}, []string{"example.com"}, []string{"pypi.org"}},
	} {
		fs := flags("trial", "")
		agent, envHosts := runtimeHostFlags(fs)
		require.NoError(t, fs.Parse(tc.args))
		require.NoError(t, settingsFromEnv(fs, lookup, "allow-agent-host", "allow-environment-host"))
		assert.Equal(t, tc.agent, agent.vals)
		assert.Equal(t, tc.envs, envHosts.vals)
	}
	fs := flags("trial", "")
	runtimeHostFlags(fs)
	require.NoError(t, fs.Parse(nil))
	err := settingsFromEnv(fs, func(k string) (string, bool) { return "https://x/", k == "SANDBOXD_ALLOW_AGENT_HOST" }, "allow-agent-host")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SANDBOXD_ALLOW_AGENT_HOST")
}
