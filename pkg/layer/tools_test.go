package layer

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseProbe(t *testing.T) {
	// util-linux's programs without bwrap: only bubblewrap is missing.
	p, err := parseProbe("tool nsenter /usr/bin/nsenter\ntool setpriv /usr/bin/setpriv\ntool unshare /usr/bin/unshare\npm apk\npm apt-get\nend\n")
	require.NoError(t, err)
	assert.Equal(t, "apk", p.PackageManager, "the first one found")
	assert.False(t, p.Root)
	bins, pkgs := p.Missing()
	assert.Equal(t, []string{"bwrap"}, bins)
	assert.Equal(t, []string{"bubblewrap"}, pkgs)
	assert.Empty(t, p.Refusal(HarborToolsBake))

	// bwrap alone is enough, even with no package manager: serve execs
	// nothing else of the image's.
	p, err = parseProbe("tool bwrap /usr/bin/bwrap\nend\n")
	require.NoError(t, err)
	bins, pkgs = p.Missing()
	assert.Empty(t, bins)
	assert.Empty(t, pkgs)
	assert.Empty(t, p.Refusal(HarborToolsBake))

	p, err = parseProbe("tool bash /bin/bash\ntool nsenter /usr/bin/nsenter\nroot\nend\n")
	require.NoError(t, err)
	assert.Equal(t, "the image lacks bwrap and has no package manager (apt-get, apk, dnf, microdnf, yum) to install bubblewrap: add bubblewrap to the image (environment/Dockerfile)",
		p.Refusal(HarborToolsBake))

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
			// Installing a package makes its program exist, as the real one
			// would; any other package (ca-certificates, nopip) brings nothing.
			script += `case "$1" in install) for a; do b=; case "$a" in bubblewrap) b=bwrap;; python3) b=python3;; python3-pip) b=pip3;; git) b=git;; curl) b=curl;; esac; ` +
				`if [ -n "$b" ] && [ ! -e "` + dir + `/nopip" -o "$b" != pip3 ]; then printf '#!/bin/sh\n' >"` + dir + `/$b"; /bin/chmod +x "` + dir + `/$b"; fi; done;; esac` + "\n"
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
	tests := []struct {
		name  string
		stubs []string
		code  int
		out   string // a line the script prints; "" = none checked
		calls string // the stubs' calls, in order; "" = none at all
	}{
		{name: "bwrap present installs nothing", stubs: []string{"bwrap", "nsenter", "setpriv", "unshare", "apt-get"}},
		{name: "bwrap without util-linux installs nothing", stubs: []string{"bwrap", "apt-get"}},
		{name: "bwrap missing, apt-get present", stubs: []string{"nsenter", "setpriv", "unshare", "apt-get", "rm"},
			out:   "the image lacks bwrap; installing bubblewrap",
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends bubblewrap\napt-get clean\n"},
		{name: "nothing of the tools, apt-get present", stubs: []string{"apt-get", "rm"},
			out:   "the image lacks bwrap; installing bubblewrap",
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends bubblewrap\napt-get clean\n"},
		{name: "bwrap missing, no package manager", stubs: []string{"nsenter", "setpriv", "unshare"}, code: exitRefused,
			out: refusedMarker + "the image lacks bwrap and has no package manager (apt-get, apk, dnf, microdnf, yum) to install bubblewrap: add bubblewrap to the image (environment/Dockerfile)"},
		{name: "the package manager did not deliver", stubs: []string{"nsenter", "setpriv", "unshare", "apk"}, code: exitRefused,
			out:   refusedMarker + "bwrap is still missing after installing bubblewrap",
			calls: "apk add --no-cache bubblewrap\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, calls := fakeRoot(t, tc.stubs...)
			out, code := runScript(t, dir, ensureToolsScript(HarborToolsOff))
			assert.Equal(t, tc.code, code, out)
			if tc.out != "" {
				assert.Contains(t, out, tc.out)
			}
			if tc.calls == "" {
				assert.NoFileExists(t, calls, "nothing installed")
				return
			}
			log, err := os.ReadFile(calls)
			require.NoError(t, err)
			assert.Equal(t, tc.calls, string(log), "only bubblewrap, and the package index removed")
		})
	}
}

func TestProbeScript(t *testing.T) {
	dir, _ := fakeRoot(t, "bwrap", "nsenter", "setpriv", "unshare", "yum", "dnf")
	out, code := runScript(t, dir, probeScript())
	require.Equal(t, 0, code, out)
	p, err := parseProbe(out)
	require.NoError(t, err)
	assert.Equal(t, "dnf", p.PackageManager, "dnf before yum")
	assert.Equal(t, filepath.Join(dir, "bwrap"), p.Tools["bwrap"])
	bins, _ := p.Missing()
	assert.Empty(t, bins)
	for _, bin := range []string{"nsenter", "setpriv", "unshare"} {
		assert.NotContains(t, out, "tool "+bin, "serve does not need %s: the probe does not ask", bin)
	}

	dir, _ = fakeRoot(t, "nsenter", "apk")
	out, code = runScript(t, dir, probeScript())
	require.Equal(t, 0, code, out)
	p, err = parseProbe(out)
	require.NoError(t, err)
	bins, pkgs := p.Missing()
	assert.Equal(t, []string{"bwrap"}, bins)
	assert.Equal(t, []string{"bubblewrap"}, pkgs)
}

func TestEnsureToolsScript_HarborTools(t *testing.T) {
	const all = "python3 python3-pip git ca-certificates curl"
	tests := []struct {
		name  string
		mode  HarborTools
		stubs []string
		code  int
		out   []string // lines the script prints
		calls string   // "" = nothing installed
	}{
		{name: "a bare image gets all four, without recommends", stubs: []string{"bwrap", "apt-get", "rm"},
			out:   []string{"the image lacks python3 pip git curl; installing " + all + " with apt-get without recommended packages (--no-install-recommends)"},
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends " + all + "\napt-get clean\n"},
		{name: "bwrap and the tools in one step", stubs: []string{"apt-get", "rm"},
			out:   []string{"the image lacks bwrap python3 pip git curl; installing bubblewrap " + all},
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends bubblewrap " + all + "\napt-get clean\n"},
		{name: "its own python3 and pip are kept", stubs: []string{"bwrap", "python3", "pip", "apt-get", "rm"},
			out:   []string{"the image lacks git curl; installing git ca-certificates curl"},
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends git ca-certificates curl\napt-get clean\n"},
		{name: "pip3 counts as pip", stubs: []string{"bwrap", "python3", "pip3", "git", "curl", "apt-get"}},
		{name: "apk names pip py3-pip", stubs: []string{"bwrap", "python3", "git", "curl", "apk"},
			out: []string{"installing py3-pip with apk"}, calls: "apk add --no-cache py3-pip\n"},
		{name: "no package manager: said, and the build goes on", stubs: []string{"bwrap", "git"},
			out: []string{harborMarker + "the image lacks python3 pip curl and has no package manager (apt-get, apk, dnf, microdnf, yum) to install them: the agent gets none of them"}},
		{name: "no package manager, required: refused", mode: HarborToolsRequire, stubs: []string{"bwrap", "git"}, code: exitRefused,
			out: []string{refusedMarker + "the image lacks python3 pip curl (the tools Harbor's agents expect) and has no package manager"}},
		{name: "a package that does not deliver: said", stubs: []string{"bwrap", "apt-get", "rm", "nopip"},
			out:   []string{harborMarker + "pip is still missing after installing " + all},
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends " + all + "\napt-get clean\n"},
		{name: "a package that does not deliver, required: refused", mode: HarborToolsRequire, stubs: []string{"bwrap", "apt-get", "rm", "nopip"}, code: exitRefused,
			out:   []string{refusedMarker + "pip is still missing after installing " + all + ", and --require-harbor-tools is set"},
			calls: "apt-get update -qq\napt-get install -y -qq --no-install-recommends " + all + "\napt-get clean\n"},
		{name: "off: not looked for", mode: HarborToolsOff, stubs: []string{"bwrap", "apt-get"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, calls := fakeRoot(t, tc.stubs...)
			out, code := runScript(t, dir, ensureToolsScript(tc.mode))
			assert.Equal(t, tc.code, code, out)
			for _, want := range tc.out {
				assert.Contains(t, out, want)
			}
			if tc.calls == "" {
				assert.NoFileExists(t, calls, "nothing installed")
				return
			}
			log, err := os.ReadFile(calls)
			require.NoError(t, err)
			assert.Equal(t, tc.calls, string(log))
		})
	}
}

func TestProbeScript_HarborTools(t *testing.T) {
	dir, _ := fakeRoot(t, "bwrap", "python3", "pip", "curl")
	out, code := runScript(t, dir, probeScript())
	require.Equal(t, 0, code, out)
	p, err := parseProbe(out)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"python3": filepath.Join(dir, "python3"), "pip": filepath.Join(dir, "pip"), "curl": filepath.Join(dir, "curl")}, p.Harbor)
	assert.Equal(t, []string{"git"}, p.harborMissing())
	assert.Empty(t, p.toInstall(HarborToolsBake), "no package manager: nothing to install")
	assert.Empty(t, p.Refusal(HarborToolsBake))
	assert.Contains(t, p.Refusal(HarborToolsRequire), "the image lacks git (the tools Harbor's agents expect)")

	p.PackageManager = "apt-get"
	assert.Equal(t, []string{"ca-certificates", "git"}, p.toInstall(HarborToolsBake))
	assert.Empty(t, p.toInstall(HarborToolsOff))
	assert.Empty(t, p.Refusal(HarborToolsRequire))
}
