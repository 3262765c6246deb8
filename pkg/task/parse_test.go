package task

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, src string) *Task {
	t.Helper()
	tk, err := Parse("task.toml", []byte(src))
	require.NoError(t, err)
	return tk
}

func TestParse_EmptyFileHasHarborDefaults(t *testing.T) {
	tk := parse(t, "")
	assert.Equal(t, "", tk.SchemaVersion)
	assert.Equal(t, 600*time.Second, tk.Verifier.Timeout)
	assert.Zero(t, tk.Agent.Timeout)
	assert.Equal(t, 600*time.Second, tk.Environment.BuildTimeout)
	assert.Equal(t, "linux", tk.Environment.OS)
	assert.Equal(t, NetworkPublic, tk.Environment.NetworkMode)
	assert.Nil(t, tk.Environment.Healthcheck)
	assert.Equal(t, Network{Mode: NetworkPublic}, tk.AgentNetwork())
	assert.Equal(t, Network{Mode: NetworkPublic}, tk.VerifierNetwork())
	assert.Empty(t, tk.Warnings)
}

func TestParse_HealthcheckDefaults(t *testing.T) {
	tk := parse(t, "[environment.healthcheck]\ncommand = \"true\"\n")
	assert.Equal(t, &Healthcheck{
		Command:       "true",
		Interval:      5 * time.Second,
		Timeout:       30 * time.Second,
		StartPeriod:   0,
		StartInterval: 5 * time.Second,
		Retries:       3,
	}, tk.Environment.Healthcheck)

	tk = parse(t, "[environment.healthcheck]\ncommand = \"true\"\ninterval_sec = 0.5\ntimeout_sec = 3\nstart_period_sec = 10\nstart_interval_sec = 1\nretries = 7\n")
	assert.Equal(t, &Healthcheck{
		Command:       "true",
		Interval:      500 * time.Millisecond,
		Timeout:       3 * time.Second,
		StartPeriod:   10 * time.Second,
		StartInterval: time.Second,
		Retries:       7,
	}, tk.Environment.Healthcheck)
}

func TestParse_VersionKeys(t *testing.T) {
	tests := []struct {
		src, want, warn string
	}{
		{`schema_version = "1.0"`, "1.0", ""},
		{`schema_version = "1.1"`, "1.1", ""},
		{`schema_version = "1.2"`, "1.2", ""},
		{`schema_version = "1.3"`, "1.3", ""},
		{`version = "1.0"`, "1.0", ""},
		{"schema_version = \"1.1\"\nversion = \"1.0\"", "1.1", `task.toml:2: version "1.0" ignored`},
		{`schema_version = "2.0"`, "2.0", `task.toml:1: schema version "2.0" is not one sandboxd knows`},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			tk := parse(t, tt.src)
			assert.Equal(t, tt.want, tk.SchemaVersion)
			if tt.warn == "" {
				assert.Empty(t, tk.Warnings)
			} else {
				require.Len(t, tk.Warnings, 1)
				assert.Contains(t, tk.Warnings[0], tt.warn)
			}
		})
	}
}

func TestParse_NetworkInheritancePerPhase(t *testing.T) {
	pub := Network{Mode: NetworkPublic}
	none := Network{Mode: NetworkNone}
	allow := func(h ...string) Network { return Network{Mode: NetworkAllowlist, AllowedHosts: h} }
	tests := []struct {
		name            string
		src             string
		agent, verifier Network
	}{
		{"nothing declared: public", "", pub, pub},
		{"legacy allow_internet = true", "[environment]\nallow_internet = true", pub, pub},
		{"legacy allow_internet = false", "[environment]\nallow_internet = false", none, none},
		{"environment no-network inherited by both",
			"[environment]\nnetwork_mode = \"no-network\"", none, none},
		{"environment allowlist inherited with its hosts",
			"[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.example\"]", allow("a.example"), allow("a.example")},
		{"verifier overrides, agent inherits",
			"[environment]\nallow_internet = false\n[verifier]\nnetwork_mode = \"public\"", none, pub},
		{"agent overrides, verifier inherits",
			"[environment]\nnetwork_mode = \"public\"\n[agent]\nnetwork_mode = \"no-network\"", none, pub},
		{"each phase its own allowlist",
			"[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.example\"]\n[verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"*.pypi.org\", \"files.pythonhosted.org\"]",
			allow("a.example"), allow("*.pypi.org", "files.pythonhosted.org")},
		{"allowed_hosts alone means allowlist",
			"[agent]\nallowed_hosts = [\"a.example\"]", allow("a.example"), pub},
		{"a phase with only an empty allowed_hosts inherits",
			"[environment]\nallow_internet = false\n[agent]\nallowed_hosts = []", none, none},
		{"network_mode wins over a consistent allow_internet",
			"[environment]\nallow_internet = true\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"x.example\"]", allow("x.example"), allow("x.example")},
		{"hosts are normalised and deduplicated",
			"[agent]\nallowed_hosts = [\" PyPI.org. \", \"pypi.org\", \"2001:DB8::1\", \"10.0.0.0/8\"]",
			allow("pypi.org", "2001:db8::1", "10.0.0.0/8"), pub},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := parse(t, tt.src)
			assert.Equal(t, tt.agent, tk.AgentNetwork(), "agent")
			assert.Equal(t, tt.verifier, tk.VerifierNetwork(), "verifier")
		})
	}
}

func TestParse_PhaseNetworkAsWritten(t *testing.T) {
	tk := parse(t, "[environment]\nallow_internet = false\n[verifier]\nnetwork_mode = \"public\"")
	assert.Equal(t, NetworkMode(""), tk.Agent.NetworkMode, "the agent said nothing")
	assert.Equal(t, NetworkPublic, tk.Verifier.NetworkMode)
}

func TestParse_LegacySizes(t *testing.T) {
	tests := []struct {
		memory string
		want   int64
	}{
		{"2G", 2048},
		{"2g", 2048},
		{" 10G ", 10240},
		{"1.5G", 1536},
		{"512M", 512},
		{"4096K", 4},
		{"1024k", 1},
	}
	for _, tt := range tests {
		t.Run(tt.memory, func(t *testing.T) {
			tk := parse(t, "[environment]\nmemory = \""+tt.memory+"\"\nstorage = \""+tt.memory+"\"")
			assert.Equal(t, tt.want, tk.Environment.MemoryMB)
			assert.Equal(t, tt.want, tk.Environment.StorageMB)
		})
	}
	tk := parse(t, "[environment]\nmemory = \"2G\"\nmemory_mb = 2048")
	assert.Equal(t, int64(2048), tk.Environment.MemoryMB, "agreeing spellings are fine")
}

// TestParse_Errors checks that each wrong value is reported with the file, the
// line and the key, and with what to write instead.
func TestParse_Errors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // the start of the error: "task.toml:LINE: KEY: ..."
		hint string // part of the advice
	}{
		// wrong types
		{"timeout as string", "[verifier]\ntimeout_sec = \"10m\"", "task.toml:2: verifier.timeout_sec: must be a number, not a string", "timeout_sec = 600"},
		{"memory_mb as string", "\n[environment]\ncpus = 1\nmemory_mb = \"lots\"", "task.toml:4: environment.memory_mb: must be a whole number, not a string", "memory_mb = 2048"},
		{"memory_mb with a fraction", "[environment]\nmemory_mb = 1.5", "task.toml:2: environment.memory_mb: must be a whole number, not 1.5", ""},
		{"env value as number", "[verifier.env]\nA = \"x\"\nPORT = 8080", "task.toml:3: verifier.env.PORT: environment values must be strings, not an integer", `PORT = "..."`},
		{"inline env value as bool", "[environment]\nenv = { DEBUG = true }", "task.toml:2: environment.env.DEBUG: environment values must be strings, not a boolean", ""},
		{"allow_internet as string", "[environment]\nallow_internet = \"yes\"", "task.toml:2: environment.allow_internet: must be true or false, not a string", "allow_internet = true"},
		{"section as value", "verifier = 3", "task.toml:1: verifier: must be a table, not an integer", "[verifier]"},
		{"metadata as value", "metadata = \"x\"", "task.toml:1: metadata: must be a table, not a string", ""},
		{"keywords not strings", "[task]\nkeywords = [\"a\", 2]", "task.toml:2: task.keywords: element 1 must be a string, not an integer", ""},
		{"user as bool", "[agent]\nuser = true", "task.toml:2: agent.user: must be a user name or uid, not a boolean", `user = "1000:1000"`},
		{"schema_version as float", "schema_version = 1.1", "task.toml:1: schema_version: must be a string, not a float", ""},
		{"artifact of wrong kind", "artifacts = [1]", "task.toml:1: artifacts[0]: each artifact is a path or a table", ""},
		// out of range
		{"negative verifier timeout", "[verifier]\ntimeout_sec = -1", "task.toml:2: verifier.timeout_sec: must be positive seconds, not -1", "timeout_sec = 600"},
		{"zero agent timeout", "[agent]\ntimeout_sec = 0", "task.toml:2: agent.timeout_sec: must be positive seconds, not 0", ""},
		{"infinite timeout", "[agent]\ntimeout_sec = inf", "task.toml:2: agent.timeout_sec: must be a finite number", ""},
		{"huge timeout", "[agent]\ntimeout_sec = 1e300", "task.toml:2: agent.timeout_sec: 1e+300 seconds is too long", ""},
		{"negative start period", "[environment.healthcheck]\ncommand = \"true\"\nstart_period_sec = -5", "task.toml:3: environment.healthcheck.start_period_sec: must be zero or more seconds", ""},
		{"zero retries", "[environment.healthcheck]\ncommand = \"true\"\nretries = 0", "task.toml:3: environment.healthcheck.retries: must be 1 or more", "retries = 3"},
		{"healthcheck without command", "[environment.healthcheck]\nretries = 2", "task.toml:1: environment.healthcheck.command: a healthcheck needs a command", ""},
		{"zero cpus", "[environment]\ncpus = 0", "task.toml:2: environment.cpus: must be more than 0", "cpus = 1"},
		{"negative gpus", "[environment]\ngpus = -1", "task.toml:2: environment.gpus: must be 0 or more", ""},
		{"negative storage", "[environment]\nstorage_mb = -10", "task.toml:2: environment.storage_mb: must be more than 0", ""},
		{"bad os", "[environment]\nos = \"macos\"", "task.toml:2: environment.os: \"macos\" is not an operating system", `os = "linux"`},
		{"relative workdir", "[environment]\nworkdir = \"app\"", "task.toml:2: environment.workdir: \"app\" is not an absolute path", `workdir = "/app"`},
		{"negative uid", "[agent]\nuser = -1", "task.toml:2: agent.user: -1 is not a uid", ""},
		// sizes
		{"size without unit", "[environment]\nmemory = \"2048\"", "task.toml:2: environment.memory: \"2048\" is not a size: it needs a unit G, M or K", "memory_mb = 2048"},
		{"size with GB", "[environment]\nstorage = \"10GB\"", "task.toml:2: environment.storage: \"10GB\" is not a size", `storage = "10G"`},
		{"size not a number", "[environment]\nmemory = \"lotsG\"", "task.toml:2: environment.memory: \"lotsG\" is not a size", ""},
		{"size NaN", "[environment]\nmemory = \"NaNG\"", "task.toml:2: environment.memory: \"NaNG\" is not a size", ""},
		{"size too small", "[environment]\nmemory = \"1K\"", "task.toml:2: environment.memory: \"1K\" is not a size: it is less than 1 MB", ""},
		{"size contradicts mb", "[environment]\nmemory_mb = 1024\nmemory = \"2G\"", "task.toml:3: environment.memory: memory = \"2G\" (2048 MB) contradicts memory_mb = 1024", "keep only memory_mb"},
		// network
		{"bad network mode", "[agent]\nnetwork_mode = \"offline\"", "task.toml:2: agent.network_mode: \"offline\" is not a network mode", `"no-network"`},
		{"allowlist without hosts", "[environment]\nnetwork_mode = \"allowlist\"", "task.toml:2: environment.network_mode: \"allowlist\" needs the hosts it admits", `allowed_hosts = ["example.com"]`},
		{"allowlist with empty hosts", "[verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = []", "task.toml:3: verifier.allowed_hosts: an allowlist with no hosts admits nothing", ""},
		{"hosts with public", "[agent]\nnetwork_mode = \"public\"\nallowed_hosts = [\"a.example\"]", "task.toml:3: agent.allowed_hosts: allowed_hosts only applies to network_mode = \"allowlist\"", ""},
		{"host is a URL", "[agent]\nallowed_hosts = [\"https://pypi.org/simple\"]", "task.toml:2: agent.allowed_hosts: entry \"https://pypi.org/simple\" is a URL", `"pypi.org"`},
		{"host with port", "[agent]\nallowed_hosts = [\"pypi.org:443\"]", "task.toml:2: agent.allowed_hosts: entry \"pypi.org:443\" has a port or a path", ""},
		{"inner wildcard", "[agent]\nallowed_hosts = [\"a.*.org\"]", "task.toml:2: agent.allowed_hosts: entry \"a.*.org\": a wildcard must be a leading", ""},
		{"cidr with host bits", "[agent]\nallowed_hosts = [\"10.1.2.3/8\"]", "task.toml:2: agent.allowed_hosts: entry \"10.1.2.3/8\" has host bits set", `"10.0.0.0/8"`},
		{"allow_internet contradicts", "[environment]\nnetwork_mode = \"public\"\nallow_internet = false", "task.toml:3: environment.allow_internet: allow_internet = false contradicts network_mode = \"public\"", "remove allow_internet"},
		// env names
		{"env name with =", "[agent.env]\n\"A=B\" = \"x\"", "task.toml:2: agent.env.\"A=B\": \"A=B\" is not a usable environment variable name", ""},
		{"bad verifier environment mode", "[verifier]\nenvironment_mode = \"elsewhere\"", "task.toml:2: verifier.environment_mode: \"elsewhere\" is not a verifier environment mode", `"shared"`},
		{"artifact escaping", "artifacts = [{ source = \"/app\", destination = \"../x\" }]", "task.toml:1: artifacts[0].destination: must be a relative path without '..'", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("task.toml", []byte(tt.src))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			ps := problems(err)
			require.Len(t, ps, 1, "one problem: %v", err)
			assert.True(t, strings.HasPrefix(err.Error(), tt.want), "got  %q\nwant %q...", err.Error(), tt.want)
			assert.Contains(t, err.Error(), tt.hint)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, "task.toml", fe.File)
			assert.Positive(t, fe.Line)
			assert.NotEmpty(t, fe.Key)
		})
	}
}

func TestParse_SyntaxErrorHasPosition(t *testing.T) {
	tests := []struct {
		src      string
		wantLine int
	}{
		{"schema_version = \"1.1\"\n[verifier\ntimeout_sec = 1", 2},
		{"a = 1\na = 2", 2},
		{"a = 1\n[verifier]\nb = {\n c = 1,\n d = [1,\n2, x]}", 6},
		{"x = \"\xff\"", 1},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := Parse("dir/task.toml", []byte(tt.src))
			require.Error(t, err)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, "dir/task.toml", fe.File)
			assert.Equal(t, tt.wantLine, fe.Line)
			assert.Contains(t, err.Error(), "invalid TOML")
		})
	}
}

func TestParse_ReportsEveryProblemInFileOrder(t *testing.T) {
	src := `[verifier]
timeout_sec = -3

[environment]
os = "windows"
memory = "big"
`
	_, err := Parse("task.toml", []byte(src))
	require.Error(t, err)
	ps := problems(err)
	require.Len(t, ps, 3)
	assert.Contains(t, ps[0].Error(), "task.toml:2: verifier.timeout_sec")
	assert.Contains(t, ps[1].Error(), "task.toml:5: environment.os")
	assert.Contains(t, ps[2].Error(), "task.toml:6: environment.memory")
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestParse_UnknownKeyWarnings(t *testing.T) {
	src := `schema_version = "1.1"
colour = "blue"

[verifier]
timeout_sec = 60
retries = 2

[environment]
allow_internet = true
mcp_servers = []
skills.dir = "/skills"

[environment.healthcheck]
command = "true"
grace = 3

[task]
name = "a/b"
authors = [{ name = "A", pronouns = "they" }]

[future_section]
a = 1
b = 2

[metadata]
anything_goes = { deep = true }

[verifier.env]
ANY_NAME = "is fine"
`
	tk := parse(t, src)
	assert.Equal(t, []string{
		`task.toml:2: unknown key "colour" (ignored)`,
		`task.toml:6: unknown key "verifier.retries" (ignored)`,
		`task.toml:11: unknown key "environment.skills" (ignored)`,
		`task.toml:15: unknown key "environment.healthcheck.grace" (ignored)`,
		`task.toml:19: unknown key "task.authors[0].pronouns" (ignored)`,
		`task.toml:21: unknown key "future_section" (ignored)`,
	}, tk.Warnings)
}

func TestParse_WarningsAreBounded(t *testing.T) {
	var b strings.Builder
	for i := range maxWarnings + 50 {
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(strings.Repeat("y", i/26))
		b.WriteString(" = 1\n")
	}
	tk := parse(t, b.String())
	require.Len(t, tk.Warnings, maxWarnings+1)
	assert.Contains(t, tk.Warnings[maxWarnings], "50 more warnings not shown")
}

func TestParse_Unsupported(t *testing.T) {
	tests := []struct {
		name, src, feature, where string
	}{
		{"windows", "[environment]\nos = \"windows\"", "Windows containers", "task.toml:2: environment.os"},
		{"Windows in capitals", "[environment]\nos = \"Windows\"", "Windows containers", "task.toml:2: environment.os"},
		{"tpu in gpu_types", "[environment]\ngpus = 1\ngpu_types = [\"H100\", \"tpu-v6e-slice\"]", "TPUs", "task.toml:3: environment.gpu_types"},
		{"tpu alias in gpu_types", "[environment]\ngpu_types = [\"v5e\"]", "TPUs", "task.toml:2: environment.gpu_types"},
		{"tpu table", "[environment.tpu]\ntype = \"v6e\"\ntopology = \"2x4\"", "TPUs", "task.toml:1: environment.tpu"},
		{"tpus count", "[environment]\ntpus = 4", "TPUs", "task.toml:2: environment.tpus"},
		{"steps array", "schema_version = \"1.3\"\n\n[[steps]]\nname = \"a\"\n\n[[steps]]\nname = \"b\"", "multi-step tasks", "task.toml:3: steps"},
		{"inline steps", "steps = [{ name = \"a\" }]", "multi-step tasks", "task.toml:1: steps"},
		{"separate verifier", "[verifier]\nenvironment_mode = \"separate\"", "a separate verifier environment", "task.toml:2: verifier.environment_mode"},
		{"verifier environment table", "[verifier.environment]\ndocker_image = \"x\"", "a separate verifier environment", "task.toml:1: verifier.environment"},
		{"multi-step reward strategy", "schema_version = \"1.4\"\nmulti_step_reward_strategy = \"mean\"", "multi-step tasks", "task.toml:2: multi_step_reward_strategy"},
		{"mcp servers", "[[environment.mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"mcp-fs\"", "MCP servers", "task.toml:1: environment.mcp_servers"},
		{"skills dir", "[environment]\nskills_dir = \"/skills\"", "agent skills", "task.toml:2: environment.skills_dir"},
		{"sidecar artifact", "artifacts = [{ source = \"/data/dump.sql\", service = \"db\" }]", "artifacts and collect hooks of a sidecar", "task.toml:1: artifacts[0].service"},
		{"sidecar collect hook", "[[verifier.collect]]\ncommand = \"pg_dump\"\nservice = \"db\"", "artifacts and collect hooks of a sidecar", "task.toml:3: verifier.collect[0].service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("task.toml", []byte(tt.src))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrUnsupported)
			var ue *UnsupportedError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, tt.feature, ue.Feature)
			assert.True(t, strings.HasPrefix(err.Error(), tt.where+": sandboxd does not support "+tt.feature+": "), "got %q", err.Error())
		})
	}
	// GPUs themselves are fine, and so is the shared verifier mode.
	tk := parse(t, "[environment]\ngpus = 2\ngpu_types = [\"H100\", \"A100\", \"T4\", \"V100\"]\n[verifier]\nenvironment_mode = \"shared\"")
	assert.Equal(t, int64(2), tk.Environment.GPUs)
}

func TestParse_ArrayTableLinesPointIntoTheRightElement(t *testing.T) {
	src := `[task]
name = "a/b"

[[task.authors]]
name = "A"
bogus = 1

[[task.authors]]
name = "B"
bogus = 2
`
	tk := parse(t, src)
	assert.Equal(t, []Author{{Name: "A"}, {Name: "B"}}, tk.Info.Authors)
	assert.Equal(t, []string{
		`task.toml:6: unknown key "task.authors[0].bogus" (ignored)`,
		`task.toml:10: unknown key "task.authors[1].bogus" (ignored)`,
	}, tk.Warnings)
}

func TestParse_IntegralFloatsAndIntTimeouts(t *testing.T) {
	tk := parse(t, "[environment]\nmemory_mb = 4096.0\ngpus = 1.0\n[agent]\ntimeout_sec = 90")
	assert.Equal(t, int64(4096), tk.Environment.MemoryMB)
	assert.Equal(t, int64(1), tk.Environment.GPUs)
	assert.Equal(t, 90*time.Second, tk.Agent.Timeout)
}

func TestParse_ErrorsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("[verifier.env]\n")
	for i := range maxProblems + 20 {
		b.WriteString("E")
		b.WriteString(strings.Repeat("x", i))
		b.WriteString(" = 1\n")
	}
	_, err := Parse("task.toml", []byte(b.String()))
	require.Error(t, err)
	ps := problems(err)
	require.Len(t, ps, maxProblems+1)
	assert.Contains(t, ps[maxProblems].Error(), "and 20 more problems not shown")
}

func TestParse_OneProblemIsReturnedBare(t *testing.T) {
	_, err := Parse("task.toml", []byte("[agent]\ntimeout_sec = -1"))
	require.Error(t, err)
	fe, ok := err.(*FieldError)
	require.True(t, ok, "got %T", err)
	assert.Equal(t, Pos{File: "task.toml", Line: 2, Key: "agent.timeout_sec"}, fe.Pos)
}

// Schema 1.4's keys that sandboxd honours are read with Harbor's defaults.
func TestParse_Schema14(t *testing.T) {
	tk := parse(t, `schema_version = "1.4"
artifacts = ["/app/out.json", { source = "/app/logs", destination = "logs", exclude = ["*.tmp"], service = "main" }]

[task]
name = "example/collect"
version = "2.1.0"

[environment]
mcp_servers = []

[[verifier.collect]]
command = "sqlite3 /app/db .dump > /app/dump.sql"

[[verifier.collect]]
command = "cp /app/state /app/state.snapshot"
service = "main"
timeout_sec = 5
user = "app"
`)
	assert.Empty(t, tk.Warnings)
	assert.Equal(t, "2.1.0", tk.Info.Version)
	assert.Equal(t, []CollectHook{
		{Command: "sqlite3 /app/db .dump > /app/dump.sql", Service: "main", Timeout: DefaultCollectTimeout},
		{Command: "cp /app/state /app/state.snapshot", Service: "main", Timeout: 5 * time.Second, User: "app"},
	}, tk.Verifier.Collect)
	assert.Equal(t, []Artifact{
		{Source: "/app/out.json"},
		{Source: "/app/logs", Destination: "logs", Exclude: []string{"*.tmp"}, Service: "main"},
	}, tk.Artifacts)

	for _, tt := range []struct{ src, want string }{
		{"[[verifier.collect]]\ntimeout_sec = 5", "task.toml:1: verifier.collect[0].command: a collect hook needs a command"},
		{"[[verifier.collect]]\ncommand = \"x\"\ntimeout_sec = 0", "task.toml:3: verifier.collect[0].timeout_sec: must be positive seconds"},
		{"[task]\nname = \"a/b\"\nversion = \"\"", "task.toml:3: task.version: the task package's version cannot be empty"},
		{"artifacts = [{ source = \"/x\", destination = \"manifest.json\" }]", "task.toml:1: artifacts[0].destination: \"manifest.json\" is reserved"},
	} {
		_, err := Parse("task.toml", []byte(tt.src))
		require.Error(t, err, tt.src)
		assert.Contains(t, err.Error(), tt.want)
	}
}
