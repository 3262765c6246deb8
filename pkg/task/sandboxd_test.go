package task

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSandboxd(t *testing.T) {
	src := `listen = ":2222"
authorized_keys = "/etc/sandboxd/keys"
egress_allow_cidrs = ["10.20.0.0/16", "fd00::/8", "192.0.2.7/32"]
entrypoint = []
image_user = "1000:1000"
image_workdir = "/app/"
image_env = ["PATH=/bin", "EMPTY=", "EQ=a=b", "PATH=/usr/bin:/bin"]

peers = [
  { name = "DB", port = 5432, target = "db:5432" },
  { name = "search", port = 9200, target = "[::1]:19200" },
]
`
	sb, warns, err := ParseSandboxd("sandboxd.toml", []byte(src))
	require.NoError(t, err)
	assert.Empty(t, warns)
	assert.Equal(t, &Sandboxd{
		Listen:         ":2222",
		AuthorizedKeys: "/etc/sandboxd/keys",
		EgressAllowCIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.20.0.0/16"),
			netip.MustParsePrefix("fd00::/8"),
			netip.MustParsePrefix("192.0.2.7/32"),
		},
		Peers: []Peer{
			{Name: "db", Port: 5432, Target: "db:5432"},
			{Name: "search", Port: 9200, Target: "[::1]:19200"},
		},
		Entrypoint:   []string{},
		ImageUser:    "1000:1000",
		ImageWorkdir: "/app",
		ImageEnv:     Env{{"PATH", "/usr/bin:/bin"}, {"EMPTY", ""}, {"EQ", "a=b"}},
	}, sb)
}

func TestParseSandboxd_Empty(t *testing.T) {
	sb, warns, err := ParseSandboxd("sandboxd.toml", nil)
	require.NoError(t, err)
	assert.Empty(t, warns)
	assert.Equal(t, &Sandboxd{}, sb)
}

func TestParseSandboxd_Errors(t *testing.T) {
	tests := []struct {
		name, src, want, hint string
	}{
		{"listen not host:port", `listen = "2222"`, "sandboxd.toml:1: listen: \"2222\" is not a listen address", `listen = "0.0.0.0:2222"`},
		{"listen port out of range", `listen = ":70000"`, "sandboxd.toml:1: listen: \":70000\" is not a listen address: the port must be", ""},
		{"listen as number", `listen = 2222`, "sandboxd.toml:1: listen: must be a string, not an integer", ""},
		{"empty authorized_keys", `authorized_keys = " "`, "sandboxd.toml:1: authorized_keys: is empty", ""},
		{"cidr is an address", `egress_allow_cidrs = ["10.0.0.5"]`, "sandboxd.toml:1: egress_allow_cidrs: \"10.0.0.5\" is not a CIDR prefix", `"10.0.0.5/32"`},
		{"cidr with host bits", `egress_allow_cidrs = ["10.0.0.5/8"]`, "sandboxd.toml:1: egress_allow_cidrs: \"10.0.0.5/8\" has host bits set", `"10.0.0.0/8"`},
		{"cidr garbage", `egress_allow_cidrs = ["lan"]`, "sandboxd.toml:1: egress_allow_cidrs: \"lan\" is not a CIDR prefix", `"10.20.0.0/16"`},
		{"entrypoint as string", `entrypoint = "/start.sh"`, "sandboxd.toml:1: entrypoint: must be an array of strings, not a string", `entrypoint = ["/docker-entrypoint.sh"]`},
		{"relative image_workdir", `image_workdir = "app"`, "sandboxd.toml:1: image_workdir: \"app\" is not an absolute path", ""},
		{"image_env not K=V", `image_env = ["PATH"]`, "sandboxd.toml:1: image_env: \"PATH\" is not NAME=VALUE", ""},
		{"peers as table", "[peers]\nname = \"db\"", "sandboxd.toml:1: peers: must be an array of tables, not a table", "[[peers]]"},
		{"peer without name", "[[peers]]\nport = 1\ntarget = \"a:1\"", "sandboxd.toml:1: peers[0]: a peer needs a name", `name = "db"`},
		{"peer without port", "[[peers]]\nname = \"db\"\ntarget = \"a:1\"", "sandboxd.toml:1: peers[0]: a peer needs the port", "port = 5432"},
		{"peer without target", "[[peers]]\nname = \"db\"\nport = 1", "sandboxd.toml:1: peers[0]: a peer needs the substrate address", `target = "db:5432"`},
		{"peer named localhost", "[[peers]]\nname = \"localhost\"\nport = 1\ntarget = \"a:1\"", "sandboxd.toml:2: peers[0].name: \"localhost\" is not a host name", ""},
		{"peer name with underscore", "[[peers]]\nname = \"my_db\"\nport = 1\ntarget = \"a:1\"", "sandboxd.toml:2: peers[0].name: \"my_db\" is not a host name", ""},
		{"peer port zero", "[[peers]]\nname = \"db\"\nport = 0\ntarget = \"a:1\"", "sandboxd.toml:3: peers[0].port: 0 is not a port", ""},
		{"peer target without host", "[[peers]]\nname = \"db\"\nport = 1\ntarget = \":5432\"", "sandboxd.toml:4: peers[0].target: \":5432\" is not a substrate address: it has no host", ""},
		{"peer target without port", "[[peers]]\nname = \"db\"\nport = 1\ntarget = \"db\"", "sandboxd.toml:4: peers[0].target: \"db\" is not a substrate address", ""},
		{"second peer's bad port is on its own line",
			"[[peers]]\nname = \"a\"\nport = 1\ntarget = \"a:1\"\n\n[[peers]]\nname = \"b\"\nport = 99999\ntarget = \"b:1\"",
			"sandboxd.toml:8: peers[1].port: 99999 is not a port", ""},
		{"first peer's bad port is on its own line",
			"[[peers]]\nname = \"a\"\nport = 99999\ntarget = \"a:1\"\n\n[[peers]]\nname = \"b\"\nport = 2\ntarget = \"b:1\"",
			"sandboxd.toml:3: peers[0].port: 99999 is not a port", ""},
		{"duplicate peer",
			"[[peers]]\nname = \"db\"\nport = 1\ntarget = \"a:1\"\n[[peers]]\nname = \"DB\"\nport = 2\ntarget = \"b:1\"",
			"sandboxd.toml:6: peers[1].name: peer \"db\" is declared twice", ""},
		{"syntax", "listen = ", "sandboxd.toml:1: listen: invalid TOML", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseSandboxd("sandboxd.toml", []byte(tt.src))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.True(t, strings.HasPrefix(err.Error(), tt.want), "got  %q\nwant %q...", err.Error(), tt.want)
			assert.Contains(t, err.Error(), tt.hint)
		})
	}
}

func TestParseSandboxd_UnknownKeyWarnings(t *testing.T) {
	src := `listen = ":22"
port = 22

[[peers]]
name = "db"
port = 5432
target = "db:5432"
protocol = "tcp"

[image]
user = "app"
`
	sb, warns, err := ParseSandboxd("sandboxd.toml", []byte(src))
	require.NoError(t, err)
	assert.Len(t, sb.Peers, 1)
	assert.Equal(t, []string{
		`sandboxd.toml:2: unknown key "port" (ignored)`,
		`sandboxd.toml:8: unknown key "peers[0].protocol" (ignored)`,
		`sandboxd.toml:10: unknown key "image" (ignored)`,
	}, warns)
}
