package layer

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdapt_HarborTools(t *testing.T) {
	const sandbox = "tool bwrap /usr/bin/bwrap\ntool bash /bin/bash\nroot\n"
	added := func(path, pkg string) ToolEntry { return ToolEntry{Status: ToolAdded, Path: path, Package: pkg} }
	tests := []struct {
		name      string
		mode      HarborTools
		partial   bool   // the engine loads partial archives (Docker)
		probe     string // the base's
		after     string // the adapted image's, when something is installed
		installed []string
		report    []ToolEntry // Tool is filled in from HarborToolNames
		warning   string
		refused   string
		table     string
	}{
		{name: "a bare image gets all four", partial: true,
			probe: sandbox + "pm apt-get\nend\n", after: sandbox + harborAll + "pm apt-get\nend\n",
			installed: []string{"ca-certificates", "curl", "git", "python3", "python3-pip"},
			report: []ToolEntry{added("/usr/bin/python3", "python3"), added("/usr/bin/pip3", "python3-pip"),
				added("/usr/bin/git", "git ca-certificates"), added("/usr/bin/curl", "curl ca-certificates")},
			table: "added python3,pip,git,curl"},
		{name: "the image's own python3 is kept", partial: true,
			probe:     sandbox + "harbor python3 /usr/local/bin/python3\nharbor pip /usr/local/bin/pip\npm apt-get\nend\n",
			after:     sandbox + "harbor python3 /usr/local/bin/python3\nharbor pip /usr/local/bin/pip\nharbor git /usr/bin/git\nharbor curl /usr/bin/curl\npm apt-get\nend\n",
			installed: []string{"ca-certificates", "curl", "git"},
			report: []ToolEntry{{Status: ToolPresent, Path: "/usr/local/bin/python3"}, {Status: ToolPresent, Path: "/usr/local/bin/pip"},
				added("/usr/bin/git", "git ca-certificates"), added("/usr/bin/curl", "curl ca-certificates")},
			table: "kept python3,pip; added git,curl"},
		{name: "the serving Dockerfile installs them (podman)", partial: false,
			probe: sandbox + "pm dnf\nend\n", after: sandbox + harborAll + "pm dnf\nend\n",
			installed: []string{"curl", "git", "python3", "python3-pip"},
			report: []ToolEntry{added("/usr/bin/python3", "python3"), added("/usr/bin/pip3", "python3-pip"),
				added("/usr/bin/git", "git"), added("/usr/bin/curl", "curl")}},
		{name: "no package manager: missing, and adapted", partial: true, probe: sandbox + "harbor curl /bin/curl\nend\n",
			report:  []ToolEntry{{Status: ToolMissing}, {Status: ToolMissing}, {Status: ToolMissing}, {Status: ToolPresent, Path: "/bin/curl"}},
			warning: "the base lacks python3, pip, git (the tools Harbor's agents expect) and has no package manager to install them: the agent gets none of them (--require-harbor-tools refuses such an image)",
			table:   "kept curl; MISSING python3,pip,git"},
		{name: "no package manager, required: refused", mode: HarborToolsRequire, partial: true, probe: sandbox + "end\n",
			refused: "base environment/Dockerfile: the image lacks python3, pip, git, curl (the tools Harbor's agents expect) and has no package manager (apt-get, apk, dnf, microdnf, yum) to install them, and --require-harbor-tools is set"},
		{name: "off: nothing looked for or installed", mode: HarborToolsOff, partial: true, probe: sandbox + "pm apt-get\nend\n",
			report: []ToolEntry{{Status: ToolSkipped}, {Status: ToolSkipped}, {Status: ToolSkipped}, {Status: ToolSkipped}},
			table:  "skipped python3,pip,git,curl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t)
			r.task("t", taskFiles("debian:bookworm"))
			r.opts.HarborTools = tc.mode
			r.eng.partial, r.eng.probe, r.eng.after = tc.partial, tc.probe, tc.after
			m, err := r.adapt()
			require.NoError(t, err)
			if tc.refused != "" {
				require.Len(t, m.Errors, 1)
				assert.Contains(t, m.Errors[0].Error, tc.refused)
				return
			}
			require.True(t, m.OK(), "%+v", m.Errors)
			g := m.Groups[0]
			assert.Equal(t, tc.installed, g.Installed)
			for i, n := range HarborToolNames() {
				tc.report[i].Tool = n
			}
			assert.Equal(t, tc.report, g.HarborTools)
			assert.Equal(t, g.HarborTools, m.Tasks[0].HarborTools, "each task carries its group's")
			var toolsBuilds int
			for _, b := range r.eng.builds {
				if strings.Contains(b.What, "tools install") {
					toolsBuilds++
				}
			}
			if len(tc.installed) > 0 && tc.partial {
				assert.Equal(t, 1, toolsBuilds, "one install step for everything")
				assert.NotEmpty(t, g.ToolsID)
				assert.Contains(t, r.log.String(), "installing "+strings.Join(tc.installed, " "))
			} else {
				assert.Zero(t, toolsBuilds)
			}
			if tc.warning != "" {
				assert.Contains(t, m.Tasks[0].Warnings, tc.warning)
			}
			if tc.table != "" {
				var table bytes.Buffer
				m.WriteTable(&table)
				assert.Contains(t, table.String(), tc.table)
			}
		})
	}
}

func TestAdapt_HarborToolsOut(t *testing.T) {
	r := newRun(t)
	r.task("t", taskFiles("debian:bookworm"))
	r.opts.Engine = nil
	t.Setenv("SANDBOXD_ENGINE", "no-such-engine-here")
	r.opts.Out = t.TempDir()
	m, err := r.adapt()
	require.NoError(t, err)
	require.Len(t, m.Groups, 1)
	for _, e := range m.Groups[0].HarborTools {
		assert.Equal(t, ToolAtBuild, e.Status, "build.sh's serving build checks and adds them")
	}
}

func TestHarborToolsHere(t *testing.T) {
	dir, _ := fakeRoot(t, "python3", "pip3", "grep")
	tools, err := HarborToolsHere(context.Background(), []string{"PATH=" + dir})
	require.NoError(t, err)
	assert.Equal(t, []ToolEntry{
		{Tool: "python3", Status: ToolPresent, Path: filepath.Join(dir, "python3")},
		{Tool: "pip", Status: ToolPresent, Path: filepath.Join(dir, "pip3")},
		{Tool: "git", Status: ToolMissing},
		{Tool: "curl", Status: ToolMissing},
	}, tools)
}
