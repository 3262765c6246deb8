package layer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseProbe(t *testing.T) {
	p, err := parseProbe("tool bwrap /usr/bin/bwrap\ntool nsenter /usr/bin/nsenter\npm apk\npm apt-get\nend\n")
	require.NoError(t, err)
	assert.Equal(t, "apk", p.PackageManager, "the first one found")
	assert.False(t, p.Root)
	bins, pkgs := p.Missing()
	assert.Equal(t, []string{"setpriv", "unshare"}, bins)
	assert.Equal(t, []string{"util-linux"}, pkgs)
	assert.Empty(t, p.Refusal())

	p, err = parseProbe("tool bash /bin/bash\nroot\nend\n")
	require.NoError(t, err)
	assert.Equal(t, "the image lacks bwrap, nsenter, setpriv, unshare and has no package manager (apt-get, apk, dnf, microdnf, yum) to install bubblewrap and util-linux: add them to the image (environment/Dockerfile)",
		p.Refusal())

	_, err = parseProbe("tool bwrap /usr/bin/bwrap\n")
	assert.ErrorContains(t, err, "the probe did not finish")
}

// fakeRoot makes a directory of stub programs: each listed name is a script
// that appends its argv to calls.log.
func fakeRoot(t *testing.T, names ...string) (dir, calls string) {
	t.Helper()
	dir = t.TempDir()
	calls = filepath.Join(dir, "calls.log")
	for _, n := range names {
		script := "#!/bin/sh\necho \"" + n + " $*\" >>" + calls + "\n"
		if n == "rm" {
			script = "#!/bin/sh\n" // never the real one: the script cleans /var/lib/apt/lists
		}
		if n == "apt-get" {
			// "Installing" makes the programs exist, as the real one would.
			script += `case "$1" in install) for t in bwrap nsenter setpriv unshare; do printf '#!/bin/sh\n' >"` + dir + `/$t"; /bin/chmod +x "` + dir + `/$t"; done;; esac` + "\n"
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(script), 0o755))
	}
	return dir, calls
}

func runScript(t *testing.T, path, script string) (string, int) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	cmd := exec.Command(sh, "-c", script)
	// Only the stubs, plus what the script itself uses from a real system.
	cmd.Env = []string{"PATH=" + path}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func TestEnsureToolsScript(t *testing.T) {
	t.Run("nothing missing installs nothing", func(t *testing.T) {
		dir, calls := fakeRoot(t, "bwrap", "nsenter", "setpriv", "unshare", "apt-get")
		out, code := runScript(t, dir, ensureToolsScript())
		assert.Equal(t, 0, code, out)
		assert.NoFileExists(t, calls)
	})
	t.Run("bwrap missing, apt-get present", func(t *testing.T) {
		dir, calls := fakeRoot(t, "nsenter", "setpriv", "unshare", "apt-get", "rm")
		out, code := runScript(t, dir, ensureToolsScript())
		assert.Equal(t, 0, code, out)
		assert.Contains(t, out, "the image lacks bwrap; installing bubblewrap")
		log, err := os.ReadFile(calls)
		require.NoError(t, err)
		assert.Equal(t, "apt-get update -qq\napt-get install -y -qq --no-install-recommends bubblewrap\napt-get clean\n", string(log),
			"only the missing package, and the package index removed")
	})
	t.Run("everything missing, no package manager", func(t *testing.T) {
		dir, _ := fakeRoot(t)
		out, code := runScript(t, dir, ensureToolsScript())
		assert.Equal(t, exitRefused, code)
		assert.Contains(t, out, refusedMarker+"the image lacks bwrap nsenter setpriv unshare and has no package manager (apt-get, apk, dnf, microdnf, yum) to install bubblewrap util-linux")
	})
	t.Run("the package manager did not deliver", func(t *testing.T) {
		dir, _ := fakeRoot(t, "bwrap", "nsenter", "setpriv", "apk")
		out, code := runScript(t, dir, ensureToolsScript())
		assert.Equal(t, exitRefused, code)
		assert.Contains(t, out, refusedMarker+"unshare is still missing after installing util-linux")
	})
}

func TestProbeScript(t *testing.T) {
	dir, _ := fakeRoot(t, "bwrap", "setpriv", "yum", "dnf")
	out, code := runScript(t, dir, probeScript())
	require.Equal(t, 0, code, out)
	p, err := parseProbe(out)
	require.NoError(t, err)
	assert.Equal(t, "dnf", p.PackageManager, "dnf before yum")
	assert.Equal(t, filepath.Join(dir, "bwrap"), p.Tools["bwrap"])
	bins, _ := p.Missing()
	assert.Equal(t, []string{"nsenter", "unshare"}, bins)
	assert.False(t, strings.Contains(out, "tool nsenter"))
}
