package layer

import (
	"fmt"
	"sort"
	"strings"
)

// The programs serve needs from the image, and the packages that carry them
// under every package manager adapt knows (design: "Building the sandbox").
// Only bwrap: the daemon joins the sandbox itself (a raw fork and setns, see
// pkg/join), so bwrap is the one program of the image's it runs to build or
// enter the sandbox, and util-linux (nsenter, setpriv, unshare) is neither
// probed for nor installed. bubblewrap is the package's name on Debian,
// Alpine and Fedora alike. What adapt adds for the agent rather than for
// serve is in harbortools.go.
var sandboxTools = []struct{ bin, pkg string }{
	{"bwrap", "bubblewrap"},
}

// packageManagers in the order they are tried, with the command that installs
// $pkgs and leaves no package index behind.
var packageManagers = []struct{ bin, install string }{
	{"apt-get", `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs && apt-get clean && rm -rf /var/lib/apt/lists/*`},
	{"apk", `apk add --no-cache $pkgs`},
	{"dnf", `dnf install -y $pkgs && dnf clean all`},
	{"microdnf", `microdnf install -y $pkgs && microdnf clean all`},
	{"yum", `yum install -y $pkgs && yum clean all`},
}

// refusedMarker starts the line ensureToolsScript prints when it cannot help;
// adapt finds it in the build output and reports the reason as a refusal.
const refusedMarker = "sandboxd-adapt: refused: "

// exitRefused is ensureToolsScript's exit status for a refusal.
const exitRefused = 3

// probeScript reports, one fact a line, which tools and package managers the
// image has, where it has each of Harbor's agent tools, and whether
// /etc/passwd knows root (USER root needs it). It changes nothing and needs
// no network.
func probeScript() string {
	var b strings.Builder
	b.WriteString("for t in")
	for _, t := range sandboxTools {
		b.WriteString(" " + t.bin)
	}
	b.WriteString(` bash; do p=$(command -v "$t" 2>/dev/null) && echo "tool $t $p"; done; `)
	for _, t := range harborTools {
		var alts []string
		for _, c := range t.cmds {
			alts = append(alts, "command -v "+c+" 2>/dev/null")
		}
		fmt.Fprintf(&b, `p=$(%s) && echo "harbor %s $p"; `, strings.Join(alts, " || "), t.name)
	}
	b.WriteString("for m in")
	for _, m := range packageManagers {
		b.WriteString(" " + m.bin)
	}
	b.WriteString(`; do command -v "$m" >/dev/null 2>&1 && echo "pm $m"; done; grep -q '^root:' /etc/passwd 2>/dev/null && echo root; echo end`)
	return b.String()
}

// Probe is what probeScript found in an image.
type Probe struct {
	Tools          map[string]string // program → path
	Harbor         map[string]string // Harbor agent tool → path
	PackageManager string            // the first one found; "" = none
	Root           bool              // /etc/passwd has root
}

func parseProbe(out string) (Probe, error) {
	p := Probe{Tools: map[string]string{}, Harbor: map[string]string{}}
	complete := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "tool":
			p.Tools[f[1]] = f[2]
		case len(f) == 3 && f[0] == "harbor":
			p.Harbor[f[1]] = f[2]
		case len(f) == 2 && f[0] == "pm" && p.PackageManager == "":
			p.PackageManager = f[1]
		case len(f) == 1 && f[0] == "root":
			p.Root = true
		case len(f) == 1 && f[0] == "end":
			complete = true
		}
	}
	if !complete {
		return p, fmt.Errorf("the probe did not finish; it printed: %q", out)
	}
	return p, nil
}

// Missing lists the sandbox programs the image lacks, and the packages that carry them.
func (p Probe) Missing() (bins, pkgs []string) {
	seen := map[string]bool{}
	for _, t := range sandboxTools {
		if _, ok := p.Tools[t.bin]; ok {
			continue
		}
		bins = append(bins, t.bin)
		if !seen[t.pkg] {
			seen[t.pkg] = true
			pkgs = append(pkgs, t.pkg)
		}
	}
	sort.Strings(pkgs)
	return bins, pkgs
}

// Refusal says why an image cannot be adapted, or "" when it can.
func (p Probe) Refusal(mode HarborTools) string {
	if p.PackageManager != "" {
		return ""
	}
	if bins, pkgs := p.Missing(); len(bins) > 0 {
		return noToolsReason(bins, pkgs)
	}
	if h := p.harborMissing(); mode == HarborToolsRequire && len(h) > 0 {
		return noHarborToolsReason(h)
	}
	return ""
}

// toInstall lists the packages a tools step installs under mode: the
// sandbox's missing ones and, unless off, Harbor's missing ones that the
// image's package manager can add.
func (p Probe) toInstall(mode HarborTools) []string {
	_, pkgs := p.Missing()
	if p.PackageManager == "" {
		return pkgs
	}
	if mode != HarborToolsOff {
		pkgs = append(pkgs, harborPackages(p.PackageManager, p.harborMissing())...)
	}
	sort.Strings(pkgs)
	return pkgs
}

func packageManagerNames() []string {
	var pms []string
	for _, m := range packageManagers {
		pms = append(pms, m.bin)
	}
	return pms
}

func noToolsReason(bins, pkgs []string) string {
	return fmt.Sprintf("the image lacks %s and has no package manager (%s) to install %s: add %[3]s to the image (environment/Dockerfile)",
		strings.Join(bins, ", "), strings.Join(packageManagerNames(), ", "), strings.Join(pkgs, " and "))
}

// ensureToolsScript installs what the image lacks of the sandbox programs
// and, unless mode is HarborToolsOff, of Harbor's agent tools, with the
// image's own package manager in one step, and nothing when it lacks
// nothing. It is the same script whether adapt probed first (docker load
// path) or not (a Dockerfile for --out or podman), so both produce the same
// image. A missing sandbox program is a refusal; a missing Harbor tool is one
// only under HarborToolsRequire, and otherwise a line that says so.
func ensureToolsScript(mode HarborTools) string {
	var b strings.Builder
	b.WriteString("set -e; missing=; pkgs=; hmissing=; for tp in")
	for _, t := range sandboxTools {
		b.WriteString(" " + t.bin + ":" + t.pkg)
	}
	b.WriteString(`; do t=${tp%%:*}; p=${tp#*:}; command -v "$t" >/dev/null 2>&1 && continue; missing="$missing $t"; case " $pkgs " in *" $p "*) ;; *) pkgs="$pkgs $p";; esac; done; `)
	if mode != HarborToolsOff {
		for _, t := range harborTools {
			fmt.Fprintf(&b, `%s || hmissing="$hmissing %s"; `, harborHave(t), t.name)
		}
	}
	b.WriteString(`[ -z "$missing$hmissing" ] && exit 0; pm=; for m in`)
	for _, m := range packageManagers {
		b.WriteString(" " + m.bin)
	}
	b.WriteString(`; do command -v "$m" >/dev/null 2>&1 && { pm=$m; break; }; done; `)
	pms := strings.Join(packageManagerNames(), ", ")
	fmt.Fprintf(&b, `if [ -z "$pm" ]; then if [ -n "$missing" ]; then echo "%sthe image lacks$missing and has no package manager (%s) to install$pkgs: add$pkgs to the image (environment/Dockerfile)" >&2; exit %d; fi; `,
		refusedMarker, pms, exitRefused)
	if mode == HarborToolsRequire {
		fmt.Fprintf(&b, `echo "%sthe image lacks$hmissing (the tools Harbor's agents expect) and has no package manager (%s) to install them, and --require-harbor-tools is set: add them to the image (environment/Dockerfile) or drop --require-harbor-tools" >&2; exit %d; fi; `,
			refusedMarker, pms, exitRefused)
	} else {
		fmt.Fprintf(&b, `echo "%sthe image lacks$hmissing and has no package manager (%s) to install them: the agent gets none of them"; exit 0; fi; `, harborMarker, pms)
	}
	if mode != HarborToolsOff {
		b.WriteString(`for t in $hmissing; do case "$pm:$t" in `)
		for _, t := range harborTools {
			for _, m := range packageManagers {
				if p, ok := t.pkgs[m.bin]; ok {
					fmt.Fprintf(&b, `%s:%s) p="%s";; `, m.bin, t.name, p)
				}
			}
			fmt.Fprintf(&b, `*:%s) p="%s";; `, t.name, t.pkgs[""])
		}
		b.WriteString(`esac; for q in $p; do case " $pkgs " in *" $q "*) ;; *) pkgs="$pkgs $q";; esac; done; done; `)
	}
	b.WriteString(`how=; [ "$pm" = apt-get ] && how=" without recommended packages (--no-install-recommends)"; `)
	b.WriteString(`echo "sandboxd-adapt: the image lacks$missing$hmissing; installing$pkgs with $pm$how"; case "$pm" in `)
	for _, m := range packageManagers {
		fmt.Fprintf(&b, "%s) %s;; ", m.bin, m.install)
	}
	b.WriteString("esac; ")
	fmt.Fprintf(&b, `for t in $missing; do command -v "$t" >/dev/null 2>&1 || { echo "%s$t is still missing after installing$pkgs" >&2; exit %d; }; done`, refusedMarker, exitRefused)
	if mode != HarborToolsOff {
		b.WriteString("; ")
		for _, t := range harborTools {
			if mode == HarborToolsRequire {
				fmt.Fprintf(&b, `case " $hmissing " in *" %s "*) %s || { echo "%s%s is still missing after installing$pkgs, and --require-harbor-tools is set" >&2; exit %d; };; esac; `,
					t.name, harborHave(t), refusedMarker, t.name, exitRefused)
			} else {
				fmt.Fprintf(&b, `case " $hmissing " in *" %s "*) %s || echo "%s%s is still missing after installing$pkgs";; esac; `,
					t.name, harborHave(t), harborMarker, t.name)
			}
		}
		b.WriteString("true")
	}
	return b.String()
}

// harborMarker starts the lines ensureToolsScript prints about a Harbor tool
// it could not provide, which do not stop the build.
const harborMarker = "sandboxd-adapt: warning: "

// harborHave is the shell test that t is on PATH under any of its names.
func harborHave(t harborTool) string {
	var alts []string
	for _, c := range t.cmds {
		alts = append(alts, "command -v "+c+" >/dev/null 2>&1")
	}
	return "{ " + strings.Join(alts, " || ") + "; }"
}
