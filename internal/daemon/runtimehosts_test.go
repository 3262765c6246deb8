package daemon

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// status names every host the harness added at run time, apart from the
// task's own policy, and the phases' policies show what they gained.
func TestStatusNamesRuntimeHosts(t *testing.T) {
	sandboxtest.RequireRoot(t)
	dir := taskDir(t, "[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"no-network\"\n", "echo 1 > /logs/verifier/reward.txt")
	cfg := config.Config{HarnessDir: sandboxtest.HarnessDir(t), Log: slog.New(slog.DiscardHandler)}
	cfg, err := config.Configure(cfg, dir, nil, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	cfg, err = config.AllowRuntimeHosts(cfg, []string{"api.anthropic.com"}, []string{"pypi.org"})
	require.NoError(t, err)
	s := serveForTest(t, cfg)
	st := s.d.Status()
	assert.Equal(t, "allowlist", st.Network.Agent)
	assert.Equal(t, "no-network", st.Network.Verifier, "the verifier's own policy gains nothing")
	require.NotNil(t, st.Network.RuntimeHosts)
	assert.Equal(t, []string{"api.anthropic.com"}, st.Network.RuntimeHosts.Agent)
	assert.Equal(t, []string{"pypi.org"}, st.Network.RuntimeHosts.Environment)
	assert.Equal(t, []string{"pypi.org", "api.anthropic.com"}, st.Network.RuntimeHosts.AddedToAgent)
	assert.Empty(t, st.Network.RuntimeHosts.AddedToVerifier)
}
