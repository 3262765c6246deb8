package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/egress"
)

// The run-time hosts follow Harbor's "Network Policy" page: agent hosts
// reach the agent phase only; environment hosts reach every phase that
// inherits the [environment] baseline and no phase with a policy of its
// own; either lifts no-network to an allowlist and extends one; a public
// phase ignores them, and says so.
func TestAllowRuntimeHosts(t *testing.T) {
	tests := []struct {
		name                 string
		toml                 string
		agent, environment   []string
		wantAgent, wantVer   egress.Policy
		addedAgent, addedVer []string
		ignored              int
	}{
		{"agent hosts lift a no-network task for the agent only",
			"[environment]\nnetwork_mode = \"no-network\"\n",
			[]string{"API.Anthropic.com."}, nil,
			egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"api.anthropic.com"}}, egress.Policy{Mode: egress.NoNetwork},
			[]string{"api.anthropic.com"}, nil, 0},
		{"environment hosts reach both phases that inherit the baseline",
			"[environment]\nnetwork_mode = \"no-network\"\n",
			nil, []string{"pypi.org"},
			egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"pypi.org"}}, egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"pypi.org"}},
			[]string{"pypi.org"}, []string{"pypi.org"}, 0},
		{"environment hosts never reach a phase with its own policy",
			"[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"no-network\"\n[agent]\nallowed_hosts = [\"example.com\"]\n",
			[]string{"api.openai.com"}, []string{"pypi.org"},
			egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"example.com", "api.openai.com"}}, egress.Policy{Mode: egress.NoNetwork},
			[]string{"api.openai.com"}, nil, 0},
		{"a public phase needs none, and the addition is noted",
			"[environment]\nnetwork_mode = \"public\"\n",
			[]string{"api.openai.com"}, []string{"pypi.org"},
			egress.Policy{Mode: egress.Public}, egress.Policy{Mode: egress.Public},
			nil, nil, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{"task.toml": tt.toml, "instruction.md": "x", "tests/test.sh": "#!/bin/sh\n"} {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755))
			}
			cfg, err := Configure(Config{HarnessDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)}, dir, nil, func(string) (string, bool) { return "", false })
			require.NoError(t, err)
			cfg, err = AllowRuntimeHosts(cfg, tt.agent, tt.environment)
			require.NoError(t, err)
			assert.Equal(t, tt.wantAgent.Mode, cfg.Network.Agent.Mode)
			assert.Equal(t, tt.wantAgent.AllowedHosts, cfg.Network.Agent.AllowedHosts)
			assert.Equal(t, tt.wantVer.Mode, cfg.Network.Verifier.Mode)
			assert.Equal(t, tt.wantVer.AllowedHosts, cfg.Network.Verifier.AllowedHosts)
			assert.Equal(t, tt.addedAgent, cfg.RuntimeHosts.AddedToAgent)
			assert.Equal(t, tt.addedVer, cfg.RuntimeHosts.AddedToVerifier)
			assert.Len(t, cfg.RuntimeHosts.Ignored, tt.ignored, "%v", cfg.RuntimeHosts.Ignored)
		})
	}

	_, err := AllowRuntimeHosts(Config{}, []string{"https://api.openai.com/v1"}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--allow-agent-host")
}
