package layer

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"text/template"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/task"
)

var facts = Facts{
	Entrypoint: []string{"/docker-entrypoint.sh", "--flag=\"quoted\""},
	User:       "app",
	Workdir:    "/app",
	Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "WEIRD=a=b <&>"},
}

func loadTask(t *testing.T, files map[string]string) *task.Task {
	t.Helper()
	dir := writeTask(t, filepath.Join(t.TempDir(), "ds", "t"), files)
	tk, err := task.Load(dir)
	require.NoError(t, err)
	return tk
}

func TestSandboxdTOML_Facts(t *testing.T) {
	tk := loadTask(t, taskFiles("x"))
	peers := []task.Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}
	b, err := SandboxdTOML(tk, facts, []string{"LANG=C", "REDIS_URL=redis://redis"}, peers, "authorized_keys")
	require.NoError(t, err)
	sb, warns, err := task.ParseSandboxd("sandboxd.toml", b)
	require.NoError(t, err, "%s", b)
	assert.Empty(t, warns)
	assert.Equal(t, facts.Entrypoint, sb.Entrypoint)
	assert.Equal(t, "app", sb.ImageUser)
	assert.Equal(t, "/app", sb.ImageWorkdir)
	assert.Equal(t, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", "WEIRD=a=b <&>", "REDIS_URL=redis://redis"}, sb.ImageEnv.Environ(),
		"compose's environment over the image's ENV, in place")
	assert.Equal(t, peers, sb.Peers)
}

func TestSandboxdTOML_NoEntrypoint(t *testing.T) {
	tk := loadTask(t, taskFiles("x"))
	b, err := SandboxdTOML(tk, Facts{}, nil, nil, "")
	require.NoError(t, err)
	assert.Contains(t, string(b), "entrypoint = []\n", "written, so serve knows the image has none")
	assert.Contains(t, string(b), "image_user = \"\"\n")
	assert.NotContains(t, string(b), "image_workdir")
}

// The task's own sandboxd.toml is kept, and the keys it writes win over
// the facts.
func TestSandboxdTOML_OwnFileWins(t *testing.T) {
	tk := loadTask(t, with(taskFiles("x"), map[string]string{
		"sandboxd.toml": `listen = "0.0.0.0:2022"
authorized_keys = "keys/agents.pub"
egress_allow_cidrs = ["10.20.0.0/16"]
entrypoint = []
image_user = "1000"
[[peers]]
name = "db"
port = 5432
target = "db.internal:5432"
`,
		"keys/agents.pub": "ssh-ed25519 AAAA test\n",
	}))
	b, err := SandboxdTOML(tk, facts, nil, []task.Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}, "authorized_keys")
	require.NoError(t, err)
	sb, _, err := task.ParseSandboxd("sandboxd.toml", b)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, "0.0.0.0:2022", sb.Listen)
	assert.Equal(t, "authorized_keys", sb.AuthorizedKeys, "the copy next to sandboxd.toml")
	assert.Equal(t, "10.20.0.0/16", sb.EgressAllowCIDRs[0].String())
	assert.Equal(t, []string{}, sb.Entrypoint, "entrypoint = [] was meant")
	assert.Equal(t, "1000", sb.ImageUser)
	assert.Equal(t, "/app", sb.ImageWorkdir, "not written by the task: the fact")
	assert.Equal(t, []task.Peer{{Name: "db", Port: 5432, Target: "db.internal:5432"}, {Name: "redis", Port: 6379, Target: "redis:6379"}}, sb.Peers)
}

func TestSandboxdTOML_PeerTwice(t *testing.T) {
	tk := loadTask(t, with(taskFiles("x"), map[string]string{
		"sandboxd.toml": "[[peers]]\nname = \"redis\"\nport = 1\ntarget = \"a:1\"\n"}))
	_, err := SandboxdTOML(tk, facts, nil, []task.Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}, "")
	assert.ErrorContains(t, err, `peer "redis" is declared both in sandboxd.toml and as a compose service`)
}

// The --out route (a template filled by `docker image inspect`) must give
// serve exactly what the inspected route gives it.
func TestSandboxdTemplate_SameAsInspected(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"plain":    taskFiles("x"),
		"own file": with(taskFiles("x"), map[string]string{"sandboxd.toml": "image_user = \"1000\"\nlisten = \":2022\"\n"}),
	} {
		t.Run(name, func(t *testing.T) {
			tk := loadTask(t, files)
			extra := []string{"LANG=C", "NEW=1"}
			peers := []task.Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}
			want, err := SandboxdTOML(tk, facts, extra, peers, "")
			require.NoError(t, err)
			rest, tmpl, err := SandboxdTemplate(tk, extra, peers, "")
			require.NoError(t, err)
			// What `docker image inspect --format` does with it: Docker's
			// template functions include json.
			tp := template.Must(template.New("").Funcs(template.FuncMap{"json": func(v any) (string, error) {
				b, err := json.Marshal(v)
				return string(b), err
			}}).Parse(tmpl))
			var got bytes.Buffer
			require.NoError(t, tp.Execute(&got, map[string]any{"Config": map[string]any{
				"Entrypoint": facts.Entrypoint, "User": facts.User, "WorkingDir": facts.Workdir, "Env": facts.Env}}))
			got.Write(rest)
			a, _, err := task.ParseSandboxd("want", want)
			require.NoError(t, err)
			b, _, err := task.ParseSandboxd("got", got.Bytes())
			require.NoError(t, err, "%s", got.String())
			assert.Equal(t, a, b)
		})
	}
}

// Where nothing needs escaping differently, the two routes write the same
// bytes, so that images built either way have the same files.
func TestSandboxdTemplate_SameBytes(t *testing.T) {
	tk := loadTask(t, taskFiles("x"))
	for name, f := range map[string]Facts{
		"plain":        {Entrypoint: []string{"/e", "-x"}, User: "app", Workdir: "/app", Env: []string{"PATH=/bin", "A=1"}},
		"empty config": {},
	} {
		t.Run(name, func(t *testing.T) {
			peers := []task.Peer{{Name: "redis", Port: 6379, Target: "redis:6379"}}
			want, err := SandboxdTOML(tk, f, []string{"NEW=1"}, peers, "")
			require.NoError(t, err)
			rest, tmpl, err := SandboxdTemplate(tk, []string{"NEW=1"}, peers, "")
			require.NoError(t, err)
			got := fillTemplate(t, tmpl, f)
			assert.Equal(t, string(want), got+string(rest))
		})
	}
}

func fillTemplate(t *testing.T, tmpl string, f Facts) string {
	t.Helper()
	tp := template.Must(template.New("").Funcs(template.FuncMap{"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}}).Parse(tmpl))
	var got bytes.Buffer
	require.NoError(t, tp.Execute(&got, map[string]any{"Config": map[string]any{
		"Entrypoint": f.Entrypoint, "User": f.User, "WorkingDir": f.Workdir, "Env": f.Env}}))
	return got.String()
}
