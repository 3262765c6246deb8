package task

import (
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtures is the shared task-file fixture directory at the repository root.
var fixtures = filepath.Join("..", "..", "testdata", "task-files")

func fixture(name string) string { return filepath.Join(fixtures, name) }

func TestLoad_SchemaVersions(t *testing.T) {
	tests := []struct {
		dir   string
		check func(t *testing.T, tk *Task)
	}{
		{"schema-1.0", func(t *testing.T, tk *Task) {
			assert.Equal(t, "1.0", tk.SchemaVersion, "legacy version key")
			assert.Equal(t, 120*time.Second, tk.Verifier.Timeout)
			assert.Equal(t, 600*time.Second, tk.Agent.Timeout)
			assert.Equal(t, 300*time.Second, tk.Environment.BuildTimeout)
			assert.Equal(t, 2.0, tk.Environment.CPUs)
			assert.Equal(t, int64(4096), tk.Environment.MemoryMB)
			assert.Equal(t, int64(10240), tk.Environment.StorageMB)
			assert.Equal(t, NetworkNone, tk.Environment.NetworkMode, "allow_internet = false")
			assert.Equal(t, Network{Mode: NetworkNone}, tk.AgentNetwork())
			assert.Equal(t, Network{Mode: NetworkNone}, tk.VerifierNetwork())
			assert.Equal(t, map[string]any{"difficulty": "easy"}, tk.Metadata)
			assert.Empty(t, tk.SolutionScript, "no solution/solve.sh")
		}},
		{"tb2-hello", func(t *testing.T, tk *Task) {
			assert.Equal(t, "1.1", tk.SchemaVersion)
		}},
		{"schema-1.2", func(t *testing.T, tk *Task) {
			assert.Equal(t, "1.2", tk.SchemaVersion)
			assert.Equal(t, "https://github.com/example/tasks", tk.Source)
			assert.Equal(t, Info{
				Name:        "example/fix-the-build",
				Description: "Fix the failing build.",
				Authors:     []Author{{Name: "Jane Doe", Email: "jane@example.com"}, {Name: "John Roe"}},
				Keywords:    []string{"build", "c"},
			}, tk.Info)
			assert.Equal(t, "root", tk.Verifier.User)
			assert.Equal(t, "1000", tk.Agent.User, "an integer user is a uid")
			assert.Equal(t, 30*time.Minute, tk.Agent.Timeout)
			assert.Equal(t, Env{{"PYTHONPATH", "/app"}, {"CI", "1"}}, tk.Verifier.Env)
			assert.Equal(t, Env{{"DEBUG", "0"}}, tk.Solution.Env)
			assert.Equal(t, Network{Mode: NetworkAllowlist, AllowedHosts: []string{"pypi.org", "*.pythonhosted.org"}},
				Network{Mode: tk.Environment.NetworkMode, AllowedHosts: tk.Environment.AllowedHosts}, "normalised hosts")
			assert.Equal(t, Network{Mode: NetworkNone}, tk.AgentNetwork())
			assert.Equal(t, Network{Mode: NetworkPublic}, tk.VerifierNetwork())
		}},
		{"schema-1.3", func(t *testing.T, tk *Task) {
			e := tk.Environment
			assert.Equal(t, "1.3", tk.SchemaVersion)
			assert.Equal(t, []Artifact{
				{Source: "/app/output.json"},
				{Source: "/app/logs", Destination: "logs", Exclude: []string{"*.tmp"}},
			}, tk.Artifacts)
			assert.Equal(t, 20*time.Minute, e.BuildTimeout)
			assert.Equal(t, "linux", e.OS, "os is case-insensitive")
			assert.Equal(t, "/app", e.Workdir)
			assert.Equal(t, 0.5, e.CPUs)
			assert.Equal(t, int64(1024), e.MemoryMB)
			assert.Equal(t, int64(2048), e.StorageMB)
			assert.Equal(t, int64(1), e.GPUs)
			assert.Equal(t, []string{"H100", "A100"}, e.GPUTypes)
			assert.Equal(t, &Healthcheck{
				Command:       "curl -fsS http://localhost:8080/health",
				Interval:      2 * time.Second,
				Timeout:       30 * time.Second,
				StartPeriod:   0,
				StartInterval: 5 * time.Second,
				Retries:       10,
			}, e.Healthcheck)
			assert.Equal(t, DefaultVerifierTimeout, tk.Verifier.Timeout)
			assert.Zero(t, tk.Agent.Timeout, "no agent timeout by default")
			assert.Equal(t, "1000:1000", tk.VerifierUser())
			assert.Equal(t, "agent", tk.AgentUser())
			assert.Equal(t, "/app", tk.Workdir(), "the task's workdir wins over the image's")
			assert.Equal(t, Network{Mode: NetworkAllowlist, AllowedHosts: []string{"example.com", "*.example.org", "192.0.2.7", "198.51.100.0/24"}}, tk.AgentNetwork())
			assert.Equal(t, Network{Mode: NetworkAllowlist, AllowedHosts: []string{"files.pythonhosted.org"}}, tk.VerifierNetwork(),
				"allowed_hosts without network_mode is an allowlist of the verifier's own")
			assert.Equal(t, map[string]any{"anything": map[string]any{"nested": []any{int64(1), int64(2), int64(3)}}}, tk.Metadata)
			assert.Equal(t, filepath.Join(fixture("schema-1.3"), "environment", "docker-compose.yaml"), tk.ComposeFile)
			assert.Equal(t, filepath.Join(fixture("schema-1.3"), "environment", "Dockerfile"), tk.Dockerfile)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			tk, err := Load(fixture(tt.dir))
			require.NoError(t, err)
			assert.Empty(t, tk.Warnings)
			assert.Equal(t, tt.dir, tk.Name, "a task is named by its directory")
			assert.Equal(t, "Do the thing.\n", tk.Instruction)
			assert.Equal(t, filepath.Join(fixture(tt.dir), "tests", "test.sh"), tk.TestScript)
			tt.check(t, tk)
		})
	}
}

func TestLoad_TerminalBench2Shape(t *testing.T) {
	tk, err := Load(fixture("tb2-hello"))
	require.NoError(t, err)

	e := tk.Environment
	assert.Equal(t, int64(2048), e.MemoryMB, `memory = "2G"`)
	assert.Equal(t, int64(10240), e.StorageMB, `storage = "10G"`)
	assert.Equal(t, NetworkPublic, e.NetworkMode, "allow_internet = true")
	assert.Equal(t, "ghcr.io/example/tb2-hello:20251031", e.DockerImage)
	assert.Equal(t, 1.0, e.CPUs)
	assert.Equal(t, 15*time.Minute, tk.Agent.Timeout)
	assert.Equal(t, 15*time.Minute, tk.Verifier.Timeout)
	assert.Equal(t, Network{Mode: NetworkPublic}, tk.AgentNetwork())
	assert.Equal(t, Network{Mode: NetworkPublic}, tk.VerifierNetwork())
	assert.Equal(t, DefaultUser, tk.AgentUser(), "TB2 tasks run as root")
	assert.Equal(t, DefaultUser, tk.VerifierUser())
	assert.Equal(t, "/", tk.Workdir(), "no workdir in the task and no image facts")
	assert.Equal(t, "Jane Doe", tk.Metadata["author_name"])
	assert.Equal(t, filepath.Join(fixture("tb2-hello"), "solution", "solve.sh"), tk.SolutionScript)
	assert.Empty(t, tk.ComposeFile)
	assert.Empty(t, tk.SandboxdFile)
}

func TestLoad_MissingTestScript(t *testing.T) {
	_, err := Load(fixture("missing-test-sh"))
	require.Error(t, err)
	want := filepath.Join(fixture("missing-test-sh"), "tests", "test.sh")
	assert.Contains(t, err.Error(), want, "the error names the path")
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestLoad_TestScriptNeedNotBeExecutable(t *testing.T) {
	fi, err := os.Stat(filepath.Join(fixture("schema-1.0"), "tests", "test.sh"))
	require.NoError(t, err)
	require.Zero(t, fi.Mode()&0o111, "fixture must lack the x bit")
	_, err = Load(fixture("schema-1.0"))
	assert.NoError(t, err, "Harbor chmods test.sh before running it")
}

func TestLoad_MissingFiles(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no task.toml", map[string]string{"instruction.md": "x", "tests/test.sh": "x"}, "task.toml: missing"},
		{"no instruction.md", map[string]string{"task.toml": "", "tests/test.sh": "x"}, "instruction.md: missing"},
		{"test.sh is a directory", map[string]string{"task.toml": "", "instruction.md": "x", "tests/test.sh/x": "x"}, "test.sh: is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTask(t, tt.files)
			_, err := Load(dir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.ErrorIs(t, err, ErrInvalid)
		})
	}
}

func TestLoad_Refusals(t *testing.T) {
	tests := []struct {
		dir, feature, where string
	}{
		{"windows", "Windows containers", "task.toml:4: environment.os"},
		{"multi-step-dir", "multi-step tasks", filepath.Join("multi-step-dir", "steps")},
		{"multi-step-array", "multi-step tasks", "task.toml:3: steps"},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			_, err := Load(fixture(tt.dir))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrUnsupported)
			var ue *UnsupportedError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, tt.feature, ue.Feature)
			assert.NotEmpty(t, ue.Reason)
			assert.Contains(t, err.Error(), tt.where)
		})
	}
}

func TestLoad_ComposeFileIsNotRefused(t *testing.T) {
	dir := writeTask(t, map[string]string{
		"task.toml": "", "instruction.md": "x", "tests/test.sh": "x",
		"environment/docker-compose.yaml": "services: {}\n",
	})
	tk, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "environment", "docker-compose.yaml"), tk.ComposeFile)

	dir = writeTask(t, map[string]string{
		"task.toml": "", "instruction.md": "x", "tests/test.sh": "x",
		"environment/docker-compose.yml": "services: {}\n",
	})
	tk, err = Load(dir)
	require.NoError(t, err)
	assert.Empty(t, tk.ComposeFile, "Harbor reads only docker-compose.yaml")
	require.Len(t, tk.Warnings, 1)
	assert.Contains(t, tk.Warnings[0], "docker-compose.yml: ignored")
}

func TestLoad_SandboxdFile(t *testing.T) {
	dir := fixture("schema-1.3")
	tk, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "sandboxd.toml"), tk.SandboxdFile)
	assert.Equal(t, Sandboxd{
		Listen:           "0.0.0.0:2222",
		AuthorizedKeys:   filepath.Join(dir, "authorized_keys"),
		EgressAllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
		Peers: []Peer{
			{Name: "db", Port: 5432, Target: "db:5432"},
			{Name: "cache.internal", Port: 6379, Target: "127.0.0.1:16379"},
		},
		Entrypoint:   []string{"/docker-entrypoint.sh", "--quiet"},
		ImageUser:    "app",
		ImageWorkdir: "/srv",
		ImageEnv:     Env{{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"LANG", "C.UTF-8"}},
	}, tk.Sandboxd)
}

func TestLoad_SandboxdFileErrorsNameTheFile(t *testing.T) {
	dir := writeTask(t, map[string]string{
		"task.toml": "", "instruction.md": "x", "tests/test.sh": "x",
		"sandboxd.toml": "listen = 2222\n",
	})
	_, err := Load(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "sandboxd.toml")+":1: listen: must be a string")
}

func TestLoad_ImageFactsFillUnsetPhaseValues(t *testing.T) {
	dir := writeTask(t, map[string]string{
		"task.toml":      "[verifier]\nuser = \"root\"\n",
		"instruction.md": "x", "tests/test.sh": "x",
		"sandboxd.toml": "image_user = \"app\"\nimage_workdir = \"/srv\"\n",
	})
	tk, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, "app", tk.AgentUser(), "no [agent].user: the image's USER")
	assert.Equal(t, "root", tk.VerifierUser())
	assert.Equal(t, "/srv", tk.Workdir(), "no workdir: the image's WORKDIR")
}

// writeTask makes a task directory from relative paths and contents.
func writeTask(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// problems flattens an error from Parse or Load into its positioned parts.
func problems(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
		case *FieldError, *UnsupportedError:
			out = append(out, x)
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		default:
			out = append(out, x)
		}
	}
	walk(err)
	return out
}

func TestLoad_RelativeDirIsNamedByTheDirectory(t *testing.T) {
	abs, err := filepath.Abs(fixture("tb2-hello"))
	require.NoError(t, err)
	t.Chdir(abs)
	tk, err := Load(".")
	require.NoError(t, err)
	assert.Equal(t, "tb2-hello", tk.Name)
	assert.Equal(t, filepath.Join("tests", "test.sh"), tk.TestScript)
}
