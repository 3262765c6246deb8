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
// probed for nor installed ("nothing else is installed"). bubblewrap is the
// package's name on Debian, Alpine and Fedora alike.
var sandboxTools = []struct{ bin, pkg string }{
	{"bwrap", "bubblewrap"},
}

// packageManagers in the order they are tried, with the command that installs
// $pkgs and leaves no package index behind ("nothing else is installed").
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
// image has and whether /etc/passwd knows root (USER root needs it). It
// changes nothing and needs no network.
func probeScript() string {
	var b strings.Builder
	b.WriteString("for t in")
	for _, t := range sandboxTools {
		b.WriteString(" " + t.bin)
	}
	b.WriteString(` bash; do p=$(command -v "$t" 2>/dev/null) && echo "tool $t $p"; done; for m in`)
	for _, m := range packageManagers {
		b.WriteString(" " + m.bin)
	}
	b.WriteString(`; do command -v "$m" >/dev/null 2>&1 && echo "pm $m"; done; grep -q '^root:' /etc/passwd 2>/dev/null && echo root; echo end`)
	return b.String()
}

// Probe is what probeScript found in an image.
type Probe struct {
	Tools          map[string]string // program → path
	PackageManager string            // the first one found; "" = none
	Root           bool              // /etc/passwd has root
}

func parseProbe(out string) (Probe, error) {
	p := Probe{Tools: map[string]string{}}
	complete := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "tool":
			p.Tools[f[1]] = f[2]
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
func (p Probe) Refusal() string {
	bins, pkgs := p.Missing()
	if len(bins) == 0 || p.PackageManager != "" {
		return ""
	}
	return noToolsReason(bins, pkgs)
}

func noToolsReason(bins, pkgs []string) string {
	var pms []string
	for _, m := range packageManagers {
		pms = append(pms, m.bin)
	}
	return fmt.Sprintf("the image lacks %s and has no package manager (%s) to install %s: add %[3]s to the image (environment/Dockerfile)",
		strings.Join(bins, ", "), strings.Join(pms, ", "), strings.Join(pkgs, " and "))
}

// ensureToolsScript installs what the image lacks of the sandbox programs with
// the image's own package manager, and nothing when it lacks nothing. It is
// the same script whether adapt probed first (docker load path) or not (a
// Dockerfile for --out or podman), so both produce the same image.
func ensureToolsScript() string {
	var b strings.Builder
	b.WriteString("set -e; missing=; pkgs=; for tp in")
	for _, t := range sandboxTools {
		b.WriteString(" " + t.bin + ":" + t.pkg)
	}
	b.WriteString(`; do t=${tp%%:*}; p=${tp#*:}; command -v "$t" >/dev/null 2>&1 && continue; missing="$missing $t"; case " $pkgs " in *" $p "*) ;; *) pkgs="$pkgs $p";; esac; done; `)
	b.WriteString(`[ -z "$missing" ] && exit 0; echo "sandboxd-adapt: the image lacks$missing; installing$pkgs"; `)
	var pms []string
	for i, m := range packageManagers {
		kw := "elif"
		if i == 0 {
			kw = "if"
		}
		fmt.Fprintf(&b, "%s command -v %s >/dev/null 2>&1; then %s; ", kw, m.bin, m.install)
		pms = append(pms, m.bin)
	}
	fmt.Fprintf(&b, `else echo "%sthe image lacks$missing and has no package manager (%s) to install$pkgs: add$pkgs to the image (environment/Dockerfile)" >&2; exit %d; fi; `,
		refusedMarker, strings.Join(pms, ", "), exitRefused)
	fmt.Fprintf(&b, `for t in $missing; do command -v "$t" >/dev/null 2>&1 || { echo "%s$t is still missing after installing$pkgs" >&2; exit %d; }; done`, refusedMarker, exitRefused)
	return b.String()
}
