//go:build e2e

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/layer"
)

// busyboxDockerfile is an image with a shell and bwrap but no package
// manager (busybox-like): Debian's static busybox and bwrap with its
// libraries over scratch.
const busyboxDockerfile = `FROM sandboxd-base:bookworm-tools AS src
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends busybox-static && \
    mkdir -p /out/bin && cp /bin/busybox /out/bin/busybox && \
    cp --parents /usr/bin/bwrap $(ldd /usr/bin/bwrap | awk '/\// { print $(NF-1) }') /out/
FROM scratch
COPY --from=src /out/ /
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /usr/bin /sbin /usr/sbin /tmp /etc && /bin/busybox --install -s && echo root:x:0:0:root:/root:/bin/sh > /etc/passwd"]
`

// TestHarborTools adapts three kinds of image with Harbor's agent tools
// baked in (docs/adapt.md, "Harbor's agent tools"): a debootstrap minbase
// with nothing added gets all four; one that ships its own python3 and pip
// under /usr/local keeps exactly those; a busybox-like one with no package
// manager is reported and adapted, and refused with --require-harbor-tools.
// The bare one then serves, and an agent session finds the tools.
func TestHarborTools(t *testing.T) {
	e := setup(t)
	root := filepath.Join(e.work, "e2e-harbor")
	bare := writeFiles(t, filepath.Join(root, "bare"), smallTask("FROM sandboxd-base:bookworm\nWORKDIR /srv\n", ""))
	own := writeFiles(t, filepath.Join(root, "own-python"), smallTask("FROM sandboxd-base:bookworm\nWORKDIR /srv\n"+
		"RUN printf '#!/bin/sh\\necho own-python \"$@\"\\n' >/usr/local/bin/python3 && printf '#!/bin/sh\\necho own-pip \"$@\"\\n' >/usr/local/bin/pip && chmod 755 /usr/local/bin/python3 /usr/local/bin/pip\n", ""))
	busybox := writeFiles(t, filepath.Join(root, "busybox"), smallTask(busyboxDockerfile, ""))

	start := time.Now()
	m, stderr, code := e.adapt(t, nil, "--tag", prefix+"-harbor", bare, own, busybox)
	require.Equal(t, 0, code, "adapt failed:\n%s", tail(stderr, 60))
	require.Len(t, m.Groups, 3)
	figure("adapt of three images with Harbor's tools: %.1fs", time.Since(start).Seconds())
	groups := map[string]layer.GroupEntry{}
	for _, g := range m.Groups {
		require.Len(t, g.Tasks, 1)
		groups[g.Tasks[0]] = g
		figure("  %s: Harbor tools %s; tools step %.1fs, %.1f MB (installed %v)", g.Tasks[0], harborCell(g.HarborTools), g.ToolsSeconds, float64(g.ToolsBytes)/1e6, g.Installed)
	}
	status := func(g layer.GroupEntry) map[string]string {
		out := map[string]string{}
		for _, te := range g.HarborTools {
			out[te.Tool] = te.Status + " " + te.Path
		}
		return out
	}
	assert.Equal(t, map[string]string{"python3": "added /usr/bin/python3", "pip": "added /usr/bin/pip3", "git": "added /usr/bin/git", "curl": "added /usr/bin/curl"},
		status(groups["bare"]))
	assert.Equal(t, map[string]string{"python3": "present /usr/local/bin/python3", "pip": "present /usr/local/bin/pip", "git": "added /usr/bin/git", "curl": "added /usr/bin/curl"},
		status(groups["own-python"]))
	assert.Equal(t, []string{"bubblewrap", "ca-certificates", "curl", "git"}, groups["own-python"].Installed, "only what was missing")
	assert.Equal(t, map[string]string{"python3": "missing ", "pip": "missing ", "git": "missing ", "curl": "missing "}, status(groups["busybox"]))
	assert.Empty(t, groups["busybox"].Installed)
	assert.Contains(t, stderr, "has no package manager to install them: the agent gets none of them")
	assert.Contains(t, stderr, "without recommended packages (--no-install-recommends)")

	// The image's own interpreter is the one on PATH, and Debian's was not
	// dragged in.
	ownImage := ""
	for _, te := range m.Tasks {
		if te.Name == "own-python" {
			ownImage = te.Image
		}
	}
	out := docker(t, "run", "--rm", "--entrypoint", "/bin/sh", ownImage, "-c", "command -v python3; python3 hi; test -e /usr/bin/python3 && echo debian-python || echo no-debian-python")
	assert.Equal(t, "/usr/local/bin/python3\nown-python hi\nno-debian-python\n", out)

	t.Run("an agent session finds them", func(t *testing.T) {
		var img string
		for _, te := range m.Tasks {
			if te.Name == "bare" {
				img = te.Image
			}
		}
		c := e.runContainer(t, img, securityFlags(e.repo))
		out, err := e.sshRun(t.Context(), c.IP, "python3 -c 'print(6*7)' && pip3 --version >/dev/null && git --version >/dev/null && curl --version >/dev/null && echo tools-ok", "")
		require.NoError(t, err, out)
		assert.Equal(t, "42\ntools-ok\n", out)
	})

	t.Run("required and missing is refused", func(t *testing.T) {
		m, stderr, code := e.adapt(t, nil, "--tag", prefix+"-harbor-req", "--require-harbor-tools", busybox)
		assert.Equal(t, 1, code)
		require.Len(t, m.Errors, 1, stderr)
		assert.Contains(t, m.Errors[0].Error, "the image lacks python3, pip, git, curl (the tools Harbor's agents expect) and has no package manager")
	})

	t.Run("off", func(t *testing.T) {
		m, stderr, code := e.adapt(t, nil, "--tag", prefix+"-harbor-off", "--no-harbor-tools", bare)
		require.Equal(t, 0, code, tail(stderr, 40))
		require.Len(t, m.Groups, 1)
		assert.Equal(t, []string{"bubblewrap"}, m.Groups[0].Installed, "the sandbox's own tool only")
		for _, te := range m.Groups[0].HarborTools {
			assert.Equal(t, layer.ToolSkipped, te.Status)
		}
	})
}

func harborCell(tools []layer.ToolEntry) string {
	var parts []string
	for _, te := range tools {
		parts = append(parts, te.Tool+"="+te.Status)
	}
	return strings.Join(parts, " ")
}
