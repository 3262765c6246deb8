package layer

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/layer/engine"
)

// A SANDBOXD_ variable in the base image's own ENV would configure serve in
// every run of the adapted image: adapt names it in its log, in the task's
// warnings and in the summary's count.
func TestAdapt_WarnsOfSandboxdVariablesInImageEnv(t *testing.T) {
	r := newRun(t)
	base := r.eng.newImage([]string{"sha256:" + string(bytes.Repeat([]byte("2"), 64))}, engine.ImageConfig{
		User: "app", WorkingDir: "/app",
		Env: []string{"PATH=/usr/bin:/bin", "SANDBOXD_NETWORK=public", "NOT_SANDBOXD_X=1", "SANDBOXD_LISTEN="},
	})
	r.eng.add(base, "example.test/base:1")
	r.task("hello", with(taskFiles("unused"), map[string]string{
		"environment/Dockerfile": "",
		"task.toml":              "schema_version = \"1.1\"\n[environment]\ndocker_image = \"example.test/base:1\"\n",
	}))
	m, err := r.adapt()
	require.NoError(t, err, r.log.String())
	require.True(t, m.OK(), "%+v", m.Errors)
	require.Len(t, m.Tasks, 1)

	var named []string
	for _, w := range m.Tasks[0].Warnings {
		if bytes.Contains([]byte(w), []byte("the image's ENV sets")) {
			named = append(named, w)
		}
	}
	require.Len(t, named, 2, "%q", m.Tasks[0].Warnings)
	assert.Contains(t, named[0], "SANDBOXD_NETWORK")
	assert.Contains(t, named[1], "SANDBOXD_LISTEN")
	assert.NotContains(t, r.log.String(), "NOT_SANDBOXD_X")
	assert.Contains(t, r.log.String(), "warning: the image's ENV sets SANDBOXD_NETWORK")

	var table bytes.Buffer
	m.WriteTable(&table)
	assert.Regexp(t, `hello\s+sb/tb:hello\s+\S+\s+ok \(\d+ warnings\)`, table.String())
	js, err := json.Marshal(m)
	require.NoError(t, err)
	assert.Contains(t, string(js), "SANDBOXD_LISTEN")
}
