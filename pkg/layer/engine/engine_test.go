package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDocker is a docker CLI stand-in, steered by environment variables.
const fakeDocker = `#!/bin/sh
case "$1" in
version)
	if [ -n "$FAKE_DOWN" ]; then
		echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
		exit 1
	fi
	echo 20.10.99;;
build)
	iid=; prev=
	for a in "$@"; do [ "$prev" = --iidfile ] && iid=$a; prev=$a; done
	echo "DEPRECATED: The legacy builder is deprecated and will be removed in a future release."
	i=1; while [ $i -le 50 ]; do echo "step $i"; i=$((i+1)); done
	echo
	[ -n "$FAKE_FAIL" ] && { printf '\033[91mE: Unable to locate package nonsense\033[0m\n' >&2; exit 100; }
	[ -n "$FAKE_SLOW" ] && exec sleep 30
	echo sha256:built >"$iid";;
image)
	echo "Error: No such image: $3" >&2; exit 1;;
esac
`

func fakeCLI(t *testing.T) *CLI {
	t.Helper()
	p := filepath.Join(t.TempDir(), "docker")
	require.NoError(t, os.WriteFile(p, []byte(fakeDocker), 0o755))
	return &CLI{Path: p, Kind: "docker"}
}

func TestDetect(t *testing.T) {
	cli := fakeCLI(t)
	t.Setenv("SANDBOXD_ENGINE", cli.Path)
	got, err := Detect(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "docker 20.10.99", got.Name())
	assert.True(t, got.LoadsPartialArchives())

	t.Setenv("FAKE_DOWN", "1")
	_, err = Detect(context.Background())
	assert.ErrorIs(t, err, ErrNoEngine)
	assert.ErrorContains(t, err, "the engine does not answer")
	assert.ErrorContains(t, err, "Cannot connect to the Docker daemon")
	assert.ErrorContains(t, err, "--out DIR")

	t.Setenv("SANDBOXD_ENGINE", "no-such-engine-here")
	_, err = Detect(context.Background())
	assert.ErrorIs(t, err, ErrNoEngine)
	assert.ErrorContains(t, err, "neither no-such-engine-here is installed")
}

func TestCLI_Build(t *testing.T) {
	cli := fakeCLI(t)
	var log bytes.Buffer
	id, err := cli.Build(context.Background(), BuildSpec{What: "x", Context: t.TempDir(), Dockerfile: "Dockerfile"}, &log)
	require.NoError(t, err)
	assert.Equal(t, "sha256:built", id)
	assert.Contains(t, log.String(), "step 1\n", "progress is streamed")

	t.Setenv("FAKE_FAIL", "1")
	_, err = cli.Build(context.Background(), BuildSpec{What: "environment/Dockerfile of t", Context: t.TempDir(), Dockerfile: "Dockerfile"}, nil)
	var be *BuildError
	require.ErrorAs(t, err, &be)
	assert.Len(t, be.Tail, 40, "the last 40 lines")
	assert.Equal(t, "step 12", be.Tail[0])
	assert.Equal(t, "E: Unable to locate package nonsense", be.Tail[39])
	assert.Contains(t, err.Error(), "build of environment/Dockerfile of t failed: docker build: exit status 100; its last 40 lines:\n    step 12\n")
}

func TestCLI_BuildTimeout(t *testing.T) {
	cli := fakeCLI(t)
	t.Setenv("FAKE_SLOW", "1")
	start := time.Now()
	_, err := cli.Build(context.Background(), BuildSpec{What: "environment/Dockerfile", Context: t.TempDir(), Dockerfile: "Dockerfile", Timeout: 300 * time.Millisecond}, nil)
	var be *BuildError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, 300*time.Millisecond, be.TimedOut)
	assert.Contains(t, err.Error(), "exceeded build_timeout_sec (300ms)")
	assert.Less(t, time.Since(start), 10*time.Second, "the client is interrupted, not waited for")
}

func TestCLI_InspectMissing(t *testing.T) {
	_, err := fakeCLI(t).Inspect(context.Background(), "nope:1")
	assert.True(t, errors.Is(err, ErrNoImage), "%v", err)
}

func TestParseInspect(t *testing.T) {
	out := `[{"Id":"sha256:abc","RepoTags":["x:1"],"Created":"2026-01-01T00:00:00Z","Architecture":"amd64","Os":"linux","Size":123,
	  "Config":{"User":"app","Env":["A=1"],"Entrypoint":["/e"],"Cmd":null,"WorkingDir":"/w","Labels":{"l":"v"},"OnBuild":null},
	  "RootFS":{"Type":"layers","Layers":["sha256:1","sha256:2"]}}]`
	img, err := parseInspect("x:1", []byte(out))
	require.NoError(t, err)
	assert.Equal(t, "sha256:abc", img.ID)
	assert.Equal(t, ImageConfig{User: "app", Env: []string{"A=1"}, Entrypoint: []string{"/e"}, WorkingDir: "/w", Labels: map[string]string{"l": "v"}}, img.Config)
	assert.Equal(t, []string{"sha256:1", "sha256:2"}, img.Layers)
	assert.Contains(t, img.RawConfig, "OnBuild", "every field is carried")
	_, err = parseInspect("x", []byte("[]"))
	assert.ErrorContains(t, err, "unexpected output")
}
