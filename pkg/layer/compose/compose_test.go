package compose

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/pkg/task"
)

const composeRedis = `version: "3.8"
services:
  main:
    depends_on: [redis]
    environment:
      REDIS_URL: redis://redis:6379/0
      FROM_HOST:
    volumes: ["./data:/data"]
    command: ["sleep", "infinity"]
  redis:
    build:
      context: ./redis
      args: {SUITE: bookworm}
    expose: ["6379", "6380/tcp"]
    command: ["redis-server", "--protected-mode", "no"]
  db:
    image: postgres:16
    ports:
      - "127.0.0.1:15432:5432"
      - target: 9999
        protocol: udp
volumes:
  pgdata: {}
`

func writeCompose(t *testing.T, content string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "environment")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "redis"), 0o755))
	p := filepath.Join(dir, "docker-compose.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestParse(t *testing.T) {
	p := writeCompose(t, composeRedis)
	c, err := Parse(p)
	require.NoError(t, err)
	require.NotNil(t, c.Main)
	assert.Equal(t, []string{"REDIS_URL=redis://redis:6379/0"}, c.Main.Env, "a bare NAME comes from the host: left out")
	require.Len(t, c.Sidecars, 2)
	db, redis := c.Sidecars[0], c.Sidecars[1]
	assert.Equal(t, "db", db.Name)
	assert.Equal(t, "postgres:16", db.Image)
	assert.Equal(t, 5432, db.Port, "the container side of host:container")
	assert.Equal(t, "redis", redis.Name)
	require.NotNil(t, redis.Build)
	assert.Equal(t, filepath.Join(filepath.Dir(p), "redis"), redis.Build.Context)
	assert.Equal(t, "Dockerfile", redis.Build.Dockerfile)
	assert.Equal(t, map[string]string{"SUITE": "bookworm"}, redis.Build.Args)
	assert.Equal(t, 6379, redis.Port)
	assert.Equal(t, []task.Peer{{Name: "db", Port: 5432, Target: "db:5432"}, {Name: "redis", Port: 6379, Target: "redis:6379"}}, c.Peers())
	assert.Len(t, c.Warnings, 2, "the second redis port and db's UDP port: %v", c.Warnings)
}

func TestParseCompose_Errors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"not yaml", "services: [", "docker-compose.yaml:1: is not valid YAML"},
		{"no services", "volumes: {}\n", "services: names no services"},
		{"sidecar without port", "services:\n  main: {}\n  cache:\n    image: redis\n", "docker-compose.yaml:3: services.cache: declares no TCP port"},
		{"sidecar with nothing to run", "services:\n  cache:\n    expose: [1]\n", "services.cache: has neither image: nor build:"},
		{"name not a host", "services:\n  my_db:\n    image: x\n    expose: [1]\n", `services.my_db: "my_db" is not a host name the sandbox can resolve`},
		{"context leaves environment", "services:\n  main:\n    build: ../..\n", `services.main.build: context "../.." leaves environment/`},
		{"remote context", "services:\n  main:\n    build: https://github.com/x/y.git\n", "is remote"},
		{"bad port", "services:\n  db:\n    image: x\n    expose: [\"http\"]\n", `docker-compose.yaml:4: services.db.expose: "http" is not a port`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(writeCompose(t, tc.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.ErrorIs(t, err, task.ErrInvalid)
		})
	}
}

func TestCompose_Emit(t *testing.T) {
	c, err := Parse(writeCompose(t, composeRedis))
	require.NoError(t, err)
	out, err := c.Emit("sb/ds:t1", map[string]string{"redis": "sb/ds-abc-redis:latest", "db": "postgres:16"}, "# header\n")
	require.NoError(t, err)
	assert.Contains(t, string(out), "# header\nservices:\n  main:\n", "main first, after the header")
	var doc struct {
		Services map[string]map[string]any
		Volumes  map[string]any
	}
	require.NoError(t, yaml.Unmarshal(out, &doc))
	main := doc.Services["main"]
	assert.Equal(t, "sb/ds:t1", main["image"])
	assert.Nil(t, main["command"], "the command belongs to sandboxd serve now")
	assert.Equal(t, []any{"seccomp=seccomp.json", "systempaths=unconfined", "apparmor=unconfined"}, main["security_opt"])
	env := main["environment"].(map[string]any)
	assert.Equal(t, "${SANDBOXD_AUTHORIZED_KEYS:?export the agents' public keys}", env["SANDBOXD_AUTHORIZED_KEYS"])
	assert.Equal(t, "redis://redis:6379/0", env["REDIS_URL"])
	assert.Equal(t, []any{"redis"}, main["depends_on"], "the task's own depends_on is kept")
	assert.Equal(t, []any{"./data:/data"}, main["volumes"])

	redis := doc.Services["redis"]
	assert.Equal(t, "sb/ds-abc-redis:latest", redis["image"], "build: replaced by the image adapt built")
	assert.Nil(t, redis["build"])
	assert.Equal(t, []any{"redis-server", "--protected-mode", "no"}, redis["command"])
	assert.Equal(t, "postgres:16", doc.Services["db"]["image"])
	assert.Contains(t, doc.Volumes, "pgdata")
}

func TestCompose_EmitDependsOnEverySidecar(t *testing.T) {
	c, err := Parse(writeCompose(t, "services:\n  b:\n    image: x\n    expose: [1]\n  a:\n    image: y\n    expose: [2]\n"))
	require.NoError(t, err)
	assert.Nil(t, c.Main, "Harbor supplies main")
	out, err := c.Emit("img", nil, "")
	require.NoError(t, err)
	var doc struct{ Services map[string]map[string]any }
	require.NoError(t, yaml.Unmarshal(out, &doc))
	assert.Equal(t, []any{"a", "b"}, doc.Services["main"]["depends_on"])
}
