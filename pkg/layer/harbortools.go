package layer

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

// Harbor's installed agents check their system dependencies with `command -v`
// before the agent phase and install what is missing; an agent that comes in
// over SSH gets none of that, so adapt bakes the common set in at build time
// (issue 14, "The tools Harbor provisions"). Each tool is looked for on its
// own, so that an image that ships its own interpreter (/usr/local/bin/python3)
// keeps exactly that one and only what is missing is added.

// HarborTools is which of Harbor's agent tools adapt provides.
type HarborTools int

const (
	// HarborToolsBake adds the missing ones where the image has a package
	// manager, and says what stays missing where it has none (the default).
	HarborToolsBake HarborTools = iota
	// HarborToolsRequire refuses an image on which any of them cannot be provided.
	HarborToolsRequire
	// HarborToolsOff checks for none of them (--no-harbor-tools), for
	// harnesses that provision their own.
	HarborToolsOff
)

// harborTool is one program Harbor's agents expect, the commands that count
// as it, and the package that carries it per package manager ("" key = every
// other manager).
type harborTool struct {
	name string
	cmds []string
	pkgs map[string]string
}

// harborTools in the order they are reported. apt's curl and git come with
// ca-certificates: --no-install-recommends would leave them unable to verify
// any https server.
var harborTools = []harborTool{
	{name: "python3", cmds: []string{"python3"}, pkgs: map[string]string{"": "python3"}},
	{name: "pip", cmds: []string{"pip3", "pip"}, pkgs: map[string]string{"apk": "py3-pip", "": "python3-pip"}},
	{name: "git", cmds: []string{"git"}, pkgs: map[string]string{"apt-get": "git ca-certificates", "": "git"}},
	{name: "curl", cmds: []string{"curl"}, pkgs: map[string]string{"apt-get": "curl ca-certificates", "": "curl"}},
}

func (t harborTool) pkgFor(pm string) string {
	if p, ok := t.pkgs[pm]; ok {
		return p
	}
	return t.pkgs[""]
}

// HarborToolNames lists the tools adapt checks for, in order.
func HarborToolNames() []string {
	out := make([]string, len(harborTools))
	for i, t := range harborTools {
		out[i] = t.name
	}
	return out
}

// Harbor tool states in the manifest.
const (
	ToolPresent = "present"               // the image had it; kept as it was
	ToolAdded   = "added"                 // adapt installed it
	ToolMissing = "missing"               // neither: the image has no package manager, or its packages did not provide it
	ToolSkipped = "skipped"               // --no-harbor-tools: not checked
	ToolAtBuild = "checked at build time" // --out: build.sh's serving build checks and adds it
)

// ToolEntry is what adapt found and did for one of Harbor's agent tools.
type ToolEntry struct {
	Tool    string `json:"tool"`
	Status  string `json:"status"`
	Path    string `json:"path,omitempty"`    // where `command -v` finds it in the adapted image
	Package string `json:"package,omitempty"` // what was installed for it
}

// harborMissing lists the tools the probed image lacks.
func (p Probe) harborMissing() []string {
	var out []string
	for _, t := range harborTools {
		if _, ok := p.Harbor[t.name]; !ok {
			out = append(out, t.name)
		}
	}
	return out
}

// harborPackages are the packages that provide names under pm, each once, sorted.
func harborPackages(pm string, names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range harborTools {
		if !slices.Contains(names, t.name) {
			continue
		}
		for _, p := range strings.Fields(t.pkgFor(pm)) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// harborReport says per tool what the image had (before) and what the
// adapted image has (after; the same probe when nothing was installed).
func harborReport(mode HarborTools, before, after Probe) []ToolEntry {
	var out []ToolEntry
	for _, t := range harborTools {
		e := ToolEntry{Tool: t.name}
		switch b, a := before.Harbor[t.name], after.Harbor[t.name]; {
		case mode == HarborToolsOff:
			e.Status = ToolSkipped
		case b != "":
			e.Status, e.Path = ToolPresent, b
		case a != "":
			e.Status, e.Path, e.Package = ToolAdded, a, t.pkgFor(before.PackageManager)
		default:
			e.Status = ToolMissing
		}
		out = append(out, e)
	}
	return out
}

// harborUnprobed is the report for --out, where nothing is probed: the
// serving build of build.sh checks for each tool and adds what it can.
func harborUnprobed(mode HarborTools) []ToolEntry {
	var out []ToolEntry
	for _, t := range harborTools {
		e := ToolEntry{Tool: t.name, Status: ToolAtBuild}
		if mode == HarborToolsOff {
			e.Status = ToolSkipped
		}
		out = append(out, e)
	}
	return out
}

// HarborToolsHere says which of Harbor's agent tools a shell with env finds
// on this machine, with the probe adapt runs in an image: for `trial`, which
// runs on the machine's own root filesystem and installs nothing, so that
// its result says what the agent had (present or missing, per tool).
func HarborToolsHere(ctx context.Context, env []string) ([]ToolEntry, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", probeScript())
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("probe for Harbor's agent tools: %w", err)
	}
	p, err := parseProbe(string(out))
	if err != nil {
		return nil, err
	}
	return harborReport(HarborToolsBake, p, p), nil
}

// harborSummary is the summary table's cell: what was kept, added, missing.
func harborSummary(tools []ToolEntry) string {
	by := map[string][]string{}
	for _, t := range tools {
		by[t.Status] = append(by[t.Status], t.Tool)
	}
	var parts []string
	for _, s := range []struct{ status, word string }{
		{ToolPresent, "kept"}, {ToolAdded, "added"}, {ToolMissing, "MISSING"}, {ToolSkipped, "skipped"}, {ToolAtBuild, "at build"},
	} {
		if len(by[s.status]) > 0 {
			parts = append(parts, s.word+" "+strings.Join(by[s.status], ","))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// noHarborToolsReason is the refusal under --require-harbor-tools of an
// image that lacks some and has no package manager to add them.
func noHarborToolsReason(names []string) string {
	return fmt.Sprintf("the image lacks %s (the tools Harbor's agents expect) and has no package manager (%s) to install them, and --require-harbor-tools is set: add them to the image (environment/Dockerfile) or drop --require-harbor-tools",
		strings.Join(names, ", "), strings.Join(packageManagerNames(), ", "))
}
