package trial

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trial --egress-allow-cidr replaces the ranges of the task's sandboxd.toml,
// as serve's flag does, rather than adding to them; without it, the task's
// own ranges hold.
func TestEgressAllowCIDRFlagReplacesTheTasks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tests"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "task.toml"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "instruction.md"), []byte("x\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tests", "test.sh"), []byte("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sandboxd.toml"), []byte("egress_allow_cidrs = [\"10.99.0.0/16\"]\n"), 0o644))
	log := slog.New(slog.DiscardHandler)

	cfg, err := serveConfig(Config{TaskDir: dir}, t.TempDir(), dir, log)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}, cfg.Network.Agent.AllowCIDRs)

	cfg, err = serveConfig(Config{TaskDir: dir, AllowCIDRs: []string{"127.0.0.0/8"}}, t.TempDir(), dir, log)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, cfg.Network.Agent.AllowCIDRs)
	assert.Equal(t, cfg.Network.Agent.AllowCIDRs, cfg.Network.Verifier.AllowCIDRs)
}
