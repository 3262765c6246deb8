package config

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/egress"
)

func noLookup(string) (string, bool) { return "", false }

// given is a Settings as serve makes it: each pair a flag name and its
// value, given on the command line (flag) or in its variable (env).
func given(source string, kv ...any) Settings {
	s := Settings{}
	for i := 0; i < len(kv); i += 2 {
		name := kv[i].(string)
		as := "--" + name
		if source == SourceEnv {
			as = "SANDBOXD_" + map[string]string{"network": "NETWORK", "allow-host": "ALLOW_HOST", "peer": "PEER", "listen": "LISTEN",
				"egress-allow-cidr": "EGRESS_ALLOW_CIDR", "authorized-keys": "AUTHORIZED_KEYS_FILE"}[name]
		}
		s[name] = Setting{Value: kv[i+1], Source: source, As: as}
	}
	return s
}

func configureForTest(t *testing.T, s Settings, taskSel string, cidrs ...string) (Config, error) {
	t.Helper()
	cfg := Config{HarnessDir: filepath.Join(t.TempDir(), "harness"), Log: slog.New(slog.DiscardHandler), Settings: s}
	return Configure(cfg, taskSel, cidrs, noLookup)
}

// Without a task, --network, --allow-host and --peer make the agent's
// policy and the peers; the verifier inherits the agent's policy at start.
func TestConfigure_NetworkSettingsWithoutTask(t *testing.T) {
	cfg, err := configureForTest(t, given(SourceFlag, "network", "allowlist", "allow-host", []string{"PyPI.org.", "*.pythonhosted.org"},
		"peer", []string{"db:5432", "cache:6379=redis.internal:16379"}), "")
	require.NoError(t, err)
	assert.Equal(t, egress.Allowlist, cfg.Network.Agent.Mode)
	assert.Equal(t, []string{"pypi.org", "*.pythonhosted.org"}, cfg.Network.Agent.AllowedHosts)
	assert.Equal(t, []Peer{{Name: "db", Port: 5432, Target: "127.0.0.1:5432"}, {Name: "cache", Port: 6379, Target: "redis.internal:16379"}}, cfg.Network.Peers)
	assert.Empty(t, cfg.Network.Verifier.Mode, "inherits the agent's at start")

	// --allow-host alone means an allowlist, as allowed_hosts does in task.toml.
	cfg, err = configureForTest(t, given(SourceEnv, "allow-host", []string{"example.com"}), "")
	require.NoError(t, err)
	assert.Equal(t, egress.Allowlist, cfg.Network.Agent.Mode)
	assert.Equal(t, Setting{Value: "allowlist", Source: SourceEnv, As: "SANDBOXD_ALLOW_HOST"}, cfg.Settings["network"])

	cfg, err = configureForTest(t, given(SourceFlag, "network", "no-network"), "")
	require.NoError(t, err)
	assert.Equal(t, egress.NoNetwork, cfg.Network.Agent.Mode)

	// Nothing given: public, as before, with the CIDRs opened.
	cfg, err = configureForTest(t, Settings{}, "", "10.1.0.0/16")
	require.NoError(t, err)
	assert.Equal(t, egress.Public, cfg.Network.Agent.Mode)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, cfg.Network.Agent.AllowCIDRs)

	for _, tc := range []struct {
		name  string
		s     Settings
		cidrs []string
		want  []string
	}{
		{"hosts under public", given(SourceFlag, "network", "public", "allow-host", []string{"a.example"}), nil, []string{"--network public", "drop --allow-host"}},
		{"allowlist without hosts", given(SourceEnv, "network", "allowlist"), nil, []string{"SANDBOXD_NETWORK allowlist", "reaches nothing"}},
		{"hosts under no-network", given(SourceFlag, "network", "no-network", "allow-host", []string{"a.example"}), nil, []string{"takes no --allow-host"}},
		{"cidrs under no-network", given(SourceFlag, "network", "no-network"), []string{"10.1.0.0/16"}, []string{"--network says no-network", "--egress-allow-cidr opens 10.1.0.0/16"}},
		{"bad peer", given(SourceEnv, "peer", []string{"db"}), nil, []string{"SANDBOXD_PEER", `peer "db" has no port`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureForTest(t, tc.s, "", tc.cidrs...)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// With a task, the network settings may restate the task's declaration —
// the agent's mode and hosts (task.toml), its peers (sandboxd.toml) — and
// nothing else: wider or narrower is refused, with both sides named.
func TestConfigure_NetworkSettingsMustRestateTheTask(t *testing.T) {
	noNet := taskDir(t, "[environment]\nnetwork_mode = \"no-network\"\n", "exit 0")
	allow := taskDir(t, "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\", \"*.pythonhosted.org\"]\n", "exit 0")
	public := taskDir(t, "", "exit 0")
	withPeers := taskDir(t, "", "exit 0")
	require.NoError(t, os.WriteFile(filepath.Join(withPeers, "sandboxd.toml"), []byte("[[peers]]\nname = \"db\"\nport = 5432\ntarget = \"db:5432\"\n"), 0o644))

	for _, tc := range []struct {
		name string
		dir  string
		s    Settings
		want []string // "" entries: accepted
	}{
		{"same mode", noNet, given(SourceFlag, "network", "no-network"), nil},
		{"public over no-network", noNet, given(SourceFlag, "network", "public"), []string{"the agent's network is no-network (task.toml)", "--network says public", "drop --network"}},
		{"no-network over public (narrower)", public, given(SourceEnv, "network", "no-network"), []string{"network is public (task.toml)", "SANDBOXD_NETWORK says no-network"}},
		{"same hosts, other order and case", allow, given(SourceFlag, "allow-host", []string{"*.PythonHosted.org", "pypi.org."}), nil},
		{"same mode and hosts", allow, given(SourceFlag, "network", "allowlist", "allow-host", []string{"pypi.org", "*.pythonhosted.org"}), nil},
		{"mode alone restates an allowlist", allow, given(SourceFlag, "network", "allowlist"), nil},
		{"a host added", allow, given(SourceFlag, "allow-host", []string{"pypi.org", "*.pythonhosted.org", "example.com"}),
			[]string{"the agent's allowed hosts are [pypi.org *.pythonhosted.org] (task.toml)", "--allow-host says [pypi.org *.pythonhosted.org example.com]"}},
		{"a host left out", allow, given(SourceEnv, "allow-host", []string{"pypi.org"}), []string{"SANDBOXD_ALLOW_HOST says [pypi.org]"}},
		{"hosts on a public task", public, given(SourceFlag, "allow-host", []string{"pypi.org"}), []string{"network is public (task.toml)", "--allow-host says allowlist [pypi.org]"}},
		{"same peers", withPeers, given(SourceFlag, "peer", []string{"DB:5432=db:5432"}), nil},
		{"peer with another target", withPeers, given(SourceFlag, "peer", []string{"db:5432"}),
			[]string{"its peers are [db:5432=db:5432] (sandboxd.toml)", "--peer says [db:5432=127.0.0.1:5432]"}},
		{"no peers given, empty", withPeers, given(SourceEnv, "peer", []string{}), []string{"SANDBOXD_PEER says none"}},
		{"a peer the task lacks", noNet, given(SourceFlag, "peer", []string{"db:5432"}), []string{"its peers are none (sandboxd.toml)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configureForTest(t, tc.s, tc.dir)
			if tc.want == nil {
				require.NoError(t, err)
				for name, set := range tc.s {
					assert.Equal(t, set.Source, cfg.Settings[name].Source, name)
				}
				if !tc.s.Given("network") {
					assert.Equal(t, SourceTask, cfg.Settings["network"].Source)
				}
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), fmt.Sprintf("task %q says", filepath.Base(tc.dir)))
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// A setting given as a flag or a variable wins over sandboxd.toml, even
// empty; one not given is taken from the file, and status says so.
func TestWithTask_GivenSettingsWinOverSandboxdTOML(t *testing.T) {
	dir := taskDir(t, "[environment]\nworkdir = \"/srv\"\n", "exit 0")
	keys := filepath.Join(dir, "keys.pub")
	require.NoError(t, os.WriteFile(keys, []byte("ssh-ed25519 AAAA from-toml\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sandboxd.toml"), []byte(
		"listen = \"127.0.0.1:2200\"\nauthorized_keys = \"keys.pub\"\negress_allow_cidrs = [\"10.9.0.0/16\"]\nimage_user = \"1000\"\n"), 0o644))

	cfg, err := configureForTest(t, Settings{}, dir, "10.8.0.0/16")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:2200", cfg.SSH.Listen)
	assert.Contains(t, string(cfg.SSH.AuthorizedKeys), "from-toml")
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("10.8.0.0/16")}, cfg.Network.Agent.AllowCIDRs)
	assert.Equal(t, Setting{Value: "127.0.0.1:2200", Source: SourceSandboxd}, cfg.Settings["listen"])
	assert.Equal(t, SourceSandboxd, cfg.Settings["authorized-keys"].Source)
	assert.Equal(t, Setting{Value: "/srv", Source: SourceTask}, cfg.Settings["workdir"])
	assert.Equal(t, Setting{Value: "1000", Source: SourceSandboxd}, cfg.Settings["agent-user"], "the image's USER, which adapt records")
	assert.Equal(t, Setting{Value: "public", Source: SourceTask}, cfg.Settings["network"])

	s := given(SourceEnv, "listen", "", "egress-allow-cidr", []string{"10.8.0.0/16"}, "authorized-keys", "")
	cfg, err = configureForTest(t, s, dir, "10.8.0.0/16")
	require.NoError(t, err)
	assert.Empty(t, cfg.SSH.Listen, "SANDBOXD_LISTEN= turns SSH off over the file's listen")
	assert.NotContains(t, string(cfg.SSH.AuthorizedKeys), "from-toml")
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.8.0.0/16")}, cfg.Network.Agent.AllowCIDRs, "a list given replaces the file's")
	assert.Equal(t, SourceEnv, cfg.Settings["listen"].Source)
	_, changed := s["workdir"]
	assert.False(t, changed, "the caller's Settings are not changed")

	// Without Settings (trial, tests), the file's values apply as before.
	cfg = Config{HarnessDir: filepath.Join(t.TempDir(), "h"), Log: slog.New(slog.DiscardHandler), SSH: SSH{Listen: "127.0.0.1:0"}}
	cfg, err = Configure(cfg, dir, nil, noLookup)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:2200", cfg.SSH.Listen)
	assert.Nil(t, cfg.Settings)
}

// taskDir writes a task with the given task.toml and a test script.
func taskDir(t *testing.T, toml, script string) string {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tests"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "task.toml"), []byte(toml), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "instruction.md"), []byte("do the thing\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tests", "test.sh"), []byte("#!/bin/bash\n"+script), 0o644))
	return dir
}
