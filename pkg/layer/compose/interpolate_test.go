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

func TestInterpolate(t *testing.T) {
	vars := map[string]string{"SET": "value", "EMPTY": "", "PORT": "6379", "NEST": "inner"}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	tests := []struct {
		in, want string
		unset    []string
		err      string
	}{
		{in: "plain", want: "plain"},
		{in: "$SET", want: "value"},
		{in: "${SET}", want: "value"},
		{in: "pre-${SET}-post and $PORT/tcp", want: "pre-value-post and 6379/tcp"},
		{in: "$SET_more", want: "", unset: []string{"SET_more"}, err: ""},
		{in: "${SET}_more", want: "value_more"},
		{in: "$$SET and $${SET}", want: "$SET and ${SET}"},
		{in: "cost $5, a lone $ and $-x", want: "cost $5, a lone $ and $-x"},
		{in: "trailing $", want: "trailing $"},
		{in: "${UNSET}", want: "", unset: []string{"UNSET"}},
		{in: "$UNSET", want: "", unset: []string{"UNSET"}},
		{in: "${UNSET:-default}", want: "default"},
		{in: "${EMPTY:-default}", want: "default"},
		{in: "${EMPTY-default}", want: ""},
		{in: "${UNSET-default}", want: "default"},
		{in: "${SET:-default}", want: "value"},
		{in: "${UNSET:-${NEST}-x}", want: "inner-x"},
		{in: "${UNSET:-${ALSO:-deep}}", want: "deep"},
		{in: "${UNSET:-a $$ b}", want: "a $ b"},
		{in: "${SET:+yes}|${EMPTY:+yes}|${EMPTY+yes}|${UNSET+yes}", want: "yes||yes|"},
		{in: "${SET:?must be set}", want: "value"},
		{in: "${EMPTY?must be set}", want: ""},
		{in: "${UNSET:?must be set}", err: "required variable UNSET is missing a value: must be set"},
		{in: "${EMPTY:?must be ${SET}}", err: "required variable EMPTY is missing a value: must be value"},
		{in: "${UNSET?}", err: "required variable UNSET is missing a value"},
		{in: "${SET", err: "${ is never closed"},
		{in: "${}", err: "a reference starts with a letter or _"},
		{in: "${1A}", err: "a reference starts with a letter or _"},
		{in: "${SET:x}", err: "after the name comes }"},
		{in: "${SET%x}", err: "after the name comes }"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, unset, err := Interpolate(tc.in, lookup)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.unset, unset)
		})
	}
}

func TestReadDotenv(t *testing.T) {
	tests := []struct {
		name, file string
		want       map[string]string
		err        string
	}{
		{name: "forms", file: "# a comment\n\nA=1\nexport B = two words \nC='single $A ${A}'\nD=\"double $A \\\"q\\\" \\n\"\nE=unquoted # a comment\nF=with#hash\nG=\nH=${A}-${OUTER}-${NONE:-d}\n",
			want: map[string]string{"A": "1", "B": "two words", "C": "single $A ${A}", "D": "double 1 \"q\" \n", "E": "unquoted", "F": "with#hash", "G": "", "H": "1-outer-d"}},
		{name: "outer wins in references", file: "OUTER=mine\nX=$OUTER\n", want: map[string]string{"OUTER": "mine", "X": "outer"}},
		{name: "not NAME=VALUE", file: "A=1\njust words\n", err: ".env:2: \"just words\" is not NAME=VALUE"},
		{name: "unclosed quote", file: "A=\"open\n", err: ".env:1: A: the quoted value does not end on its line"},
		{name: "text after the quote", file: "A=\"x\" y\n", err: ".env:1: A: \"y\" follows the closing quote"},
		{name: "required", file: "A=${NONE:?set it}\n", err: ".env:1: A: required variable NONE is missing a value: set it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), ".env")
			require.NoError(t, os.WriteFile(p, []byte(tc.file), 0o644))
			got, err := readDotenv(p, func(n string) (string, bool) {
				if n == "OUTER" {
					return "outer", true
				}
				return "", false
			})
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	got, err := readDotenv(filepath.Join(t.TempDir(), ".env"), nil)
	require.NoError(t, err)
	assert.Empty(t, got, "no .env is no entries")
}

// A task's compose file as Harbor runs it: its variables over the task's
// [environment].env over environment/.env.
func TestParse_Interpolation(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"task.toml": "schema_version = \"1.1\"\n[environment]\ncpus = 2\nmemory_mb = 1024\nenv = { REDIS_TAG = \"7\", CPUS = \"99\" }\n",
		"environment/docker-compose.yaml": `services:
  main:
    image: ${MAIN_IMAGE_NAME}
    environment:
      GREETING: ${GREETING:-hello}
      LITERAL: "cost $$5"
      WHO: $WHO
      LIMITS: ${CPUS}/${MEMORY}
    volumes: ["${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}"]
  cache:
    image: redis:${REDIS_TAG}
    expose: ["${CACHE_PORT}"]
  helper:
    build:
      context: ${CONTEXT_DIR}/helper
    expose: ["${HELPER_PORT:-8080}"]
`,
		"instruction.md":                "Do it.\n",
		"tests/test.sh":                 "#!/bin/sh\n",
		"environment/.env":              "CACHE_PORT=6380\nREDIS_TAG=6\nWHO=dotenv\nCPUS=1\n",
		"environment/Dockerfile":        "FROM x\n",
		"environment/helper/Dockerfile": "FROM x\n",
	}
	for rel, content := range files {
		p := filepath.Join(dir, "t", rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	tk, err := task.Load(filepath.Join(dir, "t"))
	require.NoError(t, err)
	c, err := ForTask(tk)
	require.NoError(t, err)

	require.NotNil(t, c.Main)
	assert.True(t, c.Main.HarborImage, "${MAIN_IMAGE_NAME} is the task's own build, not an image to pull")
	assert.Equal(t, "hb__t", c.Main.Image)
	assert.ElementsMatch(t, []string{"GREETING=hello", "LITERAL=cost $5", "WHO=dotenv", "LIMITS=2/1024M"}, c.Main.Env,
		"Harbor's CPUS wins over [environment].env and .env; .env fills what nothing else sets")
	assert.Equal(t, []any{"./logs/verifier:/logs/verifier"}, c.Main.Raw["volumes"])
	require.Len(t, c.Sidecars, 2)
	cache, helper := c.Sidecars[0], c.Sidecars[1]
	assert.Equal(t, "redis:7", cache.Image, "[environment].env wins over .env")
	assert.Equal(t, 6380, cache.Port)
	require.NotNil(t, helper.Build)
	assert.Equal(t, filepath.Join(dir, "t", "environment", "helper"), helper.Build.Context, "an absolute ${CONTEXT_DIR} context is taken as is")
	assert.Equal(t, 8080, helper.Port)

	// The emitted file is interpolated again when it runs: what was literal
	// stays literal.
	out, err := c.Emit("sb/tb:t", map[string]string{"helper": "sb/tb-x-helper:latest"}, "")
	require.NoError(t, err)
	var doc struct{ Services map[string]map[string]any }
	require.NoError(t, yaml.Unmarshal(out, &doc))
	env := doc.Services["main"]["environment"].(map[string]any)
	assert.Equal(t, "cost $$5", env["LITERAL"])
	assert.Equal(t, "${SANDBOXD_AUTHORIZED_KEYS:?export the agents' public keys}", env["SANDBOXD_AUTHORIZED_KEYS"], "adapt's own reference is not escaped")
	got, _, err := Interpolate(env["LITERAL"].(string), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	assert.Equal(t, "cost $5", got)
}

func TestParse_Refusals(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"include", "include:\n  - other.yaml\nservices:\n  a:\n    image: x\n    expose: [1]\n",
			"docker-compose.yaml:1: include: names other compose files, which adapt does not read: put their services into docker-compose.yaml"},
		{"extends", "services:\n  a:\n    extends:\n      file: common.yaml\n      service: base\n    expose: [1]\n",
			"docker-compose.yaml:3: services.a.extends: takes its settings from another service or file, which adapt does not read: write them into the service"},
		{"required variable", "services:\n  a:\n    image: ${IMAGE:?name the image}\n    expose: [1]\n",
			"docker-compose.yaml:3: services.a.image: required variable IMAGE is missing a value: name the image"},
		{"bad reference", "services:\n  a:\n    image: x\n    expose: [\"${PORT\"]\n",
			"docker-compose.yaml:4: services.a.expose[0]: invalid interpolation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(writeCompose(t, tc.src))
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParse_UnsetIsEmptyWithAWarning(t *testing.T) {
	c, err := Parse(writeCompose(t, "services:\n  a:\n    image: redis${TAG}\n    environment: [\"X=${TAG}\"]\n    expose: [1]\n"))
	require.NoError(t, err)
	assert.Equal(t, "redis", c.Sidecars[0].Image)
	require.Len(t, c.Warnings, 1, "one warning per name")
	assert.Contains(t, c.Warnings[0], "docker-compose.yaml:3: services.a.image: ${TAG} is not set")
}

func TestHarborImageName(t *testing.T) {
	for in, want := range map[string]string{"hello-world": "hb__hello-world", "Fix.Git": "hb__fix.git", "a b/c": "hb__a-b-c"} {
		assert.Equal(t, want, HarborImageName(in))
	}
}
