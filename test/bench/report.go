package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// table renders rows as a markdown table (which is also readable as text).
func table(header []string, rows [][]string) string {
	var sb strings.Builder
	sb.WriteString("| " + strings.Join(header, " | ") + " |\n")
	seps := make([]string, len(header))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "---:"
		}
	}
	sb.WriteString("|" + strings.Join(seps, "|") + "|\n")
	for _, r := range rows {
		sb.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return sb.String()
}

func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func (b *bench) mainTable() string {
	var rows [][]string
	for _, r := range b.results {
		ratio := fmt.Sprintf("%.3f×", r.ratio())
		if r.absolute {
			ratio = "–"
			if r.peerV > 0 {
				ratio = fmt.Sprintf("(%.2f×)", r.ratio())
			}
		}
		met := metText(r.met())
		if r.noTarget {
			met = "report"
		}
		rows = append(rows, []string{r.name, r.peer, fmtNum(r.peerV) + " " + r.unit, fmtNum(r.ours) + " " + r.unit, ratio, r.targetText(), met, fmt.Sprint(r.n)})
	}
	for _, e := range b.egress {
		rows = append(rows, []string{"Egress " + e.name, "direct", fmtNum(e.med(0)) + " " + e.unit, fmtNum(e.med(1)) + " " + e.unit,
			fmt.Sprintf("%.3f×", e.vsDirect()), e.targetText(), metText(e.met()), fmt.Sprint(len(e.vals[1]))})
	}
	return table([]string{"benchmark", "peer", "peer median", "sandboxd median", "sandboxd / peer", "target", "", "n"}, rows)
}

func (b *bench) egressTable() string {
	if len(b.egress) == 0 {
		return ""
	}
	var rows [][]string
	for _, e := range b.egress {
		row := []string{e.name}
		for i := range e.vals {
			row = append(row, fmtNum(e.med(i))+" "+e.unit)
		}
		row = append(row, fmt.Sprintf("%.3f×", e.vsDirect()),
			fmt.Sprintf("%.2f×", e.med(1)/e.med(2)), fmt.Sprintf("%.2f×", e.med(1)/e.med(3)), e.targetText(), metText(e.met()))
		rows = append(rows, row)
	}
	return table([]string{"egress", "direct", "sandboxd", "tinyproxy", "squid", "sandboxd / direct", "sandboxd / tinyproxy", "sandboxd / squid", "target", ""}, rows)
}

func (b *bench) scalingTable() string {
	if len(b.scaling) == 0 {
		return ""
	}
	var sb strings.Builder
	for _, g := range []struct{ group, what, unit string }{
		{"exec", "concurrent SSH sessions, each running `true` in a loop: latency of one exec", "sessions"},
		{"proxy", "concurrent tunnels (CONNECT to an echo server), each bouncing 64 bytes in a loop: round trip", "tunnels"},
	} {
		var cs []*curve
		for _, c := range b.scaling {
			if c.group == g.group {
				cs = append(cs, c)
			}
		}
		if len(cs) == 0 {
			continue
		}
		header := []string{g.unit}
		for _, c := range cs {
			header = append(header, c.name+" p50", c.name+" p99")
		}
		var rows [][]string
		for i, p := range cs[0].points {
			row := []string{fmt.Sprint(p.x)}
			for _, c := range cs {
				if i >= len(c.points) {
					row = append(row, "–", "–")
					continue
				}
				row = append(row, fmtNum(c.points[i].p50)+" ms", fmtNum(c.points[i].p99)+" ms")
			}
			rows = append(rows, row)
		}
		sb.WriteString(fmt.Sprintf("%s.\n\n", strings.ToUpper(g.what[:1])+g.what[1:]))
		sb.WriteString(table(header, rows))
		sb.WriteString("\n")
	}
	return sb.String()
}

// section is a table of its own in the report, under a heading.
type section struct {
	title string
	body  string // markdown, ending in a newline
	top   bool   // a section of the report's own (##), not under Results
}

// textReport is what the terminal gets at the end of a run.
func (b *bench) textReport() string {
	var sb strings.Builder
	mode := "full"
	if b.opt.quick {
		mode = "quick (numbers not judged)"
	}
	fmt.Fprintf(&sb, "sandboxd benchmarks — %s run, %d cores, %s, load %s → %s, %s\n\n", mode, b.machine.nproc, b.machine.model, b.machine.loadBefore, b.machine.loadAfter, b.elapsed.Round(time.Second))
	sb.WriteString(b.mainTable())
	if t := b.egressTable(); t != "" {
		sb.WriteString("\n" + t)
	}
	if t := b.scalingTable(); t != "" {
		sb.WriteString("\n" + t)
	}
	for _, s := range b.sections {
		sb.WriteString("\n" + s.title + "\n\n" + s.body)
	}
	for _, s := range b.skipped {
		sb.WriteString("skipped: " + s + "\n")
	}
	for _, f := range b.failures {
		sb.WriteString("FAILED: " + f + "\n")
	}
	return sb.String()
}

// targetCount counts the rows with a target, and those that met it.
func (b *bench) targetCount() (met, total int) {
	for _, r := range b.results {
		if r.noTarget {
			continue
		}
		total++
		if r.met() {
			met++
		}
	}
	for _, e := range b.egress {
		total++
		if e.met() {
			met++
		}
	}
	return met, total
}

// missed lists the rows whose target was missed, with what profiling found.
func (b *bench) missed() []string {
	var out []string
	for _, r := range b.results {
		if !r.met() {
			out = append(out, fmt.Sprintf("**%s** — %s %s against %s (target %s). %s", r.name, fmtNum(r.ours), r.unit, describePeer(r), r.targetText(), b.explain(r.id)))
		}
	}
	for _, e := range b.egress {
		if !e.met() {
			var why []string
			if e.target > 0 && e.vsDirect() < e.target {
				why = append(why, fmt.Sprintf("%.3f× direct", e.vsDirect()))
			}
			if !e.aheadOfPeers() {
				why = append(why, fmt.Sprintf("tinyproxy %s, squid %s %s", fmtNum(e.med(2)), fmtNum(e.med(3)), e.unit))
			}
			out = append(out, fmt.Sprintf("**Egress %s** — sandboxd %s %s: %s (target %s). %s", e.name, fmtNum(e.med(1)), e.unit, strings.Join(why, "; "), e.targetText(), b.explain(e.id)))
		}
	}
	return out
}

func describePeer(r *result) string {
	if r.absolute {
		return fmt.Sprintf("an absolute bound (%s: %s %s)", r.peer, fmtNum(r.peerV), r.unit)
	}
	return fmt.Sprintf("%s %s %s = %.3f×", r.peer, fmtNum(r.peerV), r.unit, r.ratio())
}

func (b *bench) explain(id string) string {
	if fn, ok := missExplanations[id]; ok {
		return fn(b)
	}
	if fn, ok := missExplanations[strings.SplitN(id, "-", 2)[0]]; ok {
		return fn(b)
	}
	return "No profile of this miss is recorded yet."
}

// writeReport writes the markdown report and the plot next to it.
func (b *bench) writeReport() error {
	dir := filepath.Dir(b.opt.out)
	plotName := strings.TrimSuffix(filepath.Base(b.opt.out), ".md") + "-scaling.png"
	havePlot := false
	if len(b.scaling) > 0 {
		if err := writePlot(filepath.Join(dir, plotName), b.scaling); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		havePlot = true
	}
	m := b.machine
	var sb strings.Builder
	sb.WriteString("# sandboxd benchmarks\n\n")
	sb.WriteString("Generated by the benchmark itself — do not edit by hand; run it again.\n\n")
	if b.opt.quick {
		sb.WriteString("**This is a quick run (`make bench-quick`): reduced sizes and counts; its numbers are not judged.**\n\n")
	}
	fmt.Fprintf(&sb, "```sh\nmake bench    # = make build && go run ./test/bench -out docs/benchmarks.md\n```\n\n")
	fmt.Fprintf(&sb, "Run on %s UTC as `%s`, in %s. Every pair ran alternately (A B A B …) in the same run; a figure is the median of n samples per side (n in the last column). ",
		m.date.Format("2006-01-02 15:04"), m.commandLine, b.elapsed.Round(time.Second))
	sb.WriteString("Ratios are sandboxd / peer: below 1 is faster for times, above 1 is faster for throughput.\n\n")

	sb.WriteString("## Machine\n\n")
	rows := [][]string{
		{"CPU", fmt.Sprintf("%d × %s (`nproc` = %d)", m.nproc, m.model, m.nproc)},
		{"memory", m.memory},
		{"kernel", m.kernel},
		{"load average (1, 5, 15 min)", fmt.Sprintf("%s before, %s after — the machine is shared with other work", m.loadBefore, m.loadAfter)},
	}
	for _, v := range m.versions {
		rows = append(rows, []string{v[0], v[1]})
	}
	sb.WriteString(table([]string{"", ""}, rows))

	sb.WriteString("\n## Results\n\n")
	met, total := b.targetCount()
	fmt.Fprintf(&sb, "%d of %d targets met in this run.\n\n", met, total)
	sb.WriteString(b.mainTable())
	sb.WriteString("\n")
	for _, r := range b.results {
		if r.detail != "" {
			fmt.Fprintf(&sb, "- *%s*: %s.\n", r.name, r.detail)
		}
	}
	if t := b.egressTable(); t != "" {
		sb.WriteString("\n### Egress, all four sides\n\n")
		sb.WriteString(t)
	}
	if t := b.scalingTable(); t != "" {
		sb.WriteString("\n### How cost grows\n\n")
		sb.WriteString(t)
		if havePlot {
			fmt.Fprintf(&sb, "![exec latency against concurrent SSH sessions, and proxy round trip against concurrent tunnels (log-log; solid p50, dashed p99)](%s)\n", plotName)
		}
	}
	for _, s := range b.sections {
		if !s.top {
			fmt.Fprintf(&sb, "\n### %s\n\n%s", s.title, s.body)
		}
	}
	for _, s := range b.sections {
		if s.top {
			fmt.Fprintf(&sb, "\n## %s\n\n%s", s.title, s.body)
		}
	}

	sb.WriteString("\n## Targets missed, and why\n\n")
	if ms := b.missed(); len(ms) == 0 {
		sb.WriteString("None in this run.\n")
	} else {
		for _, s := range ms {
			sb.WriteString("- " + s + "\n")
		}
	}
	if len(b.failures) > 0 {
		sb.WriteString("\n### Failed groups\n\n")
		for _, f := range b.failures {
			sb.WriteString("- " + f + "\n")
		}
	}

	sb.WriteString("\n## How each row is measured\n\n")
	sb.WriteString(methodology)
	if len(b.notes) > 0 {
		sb.WriteString("\nChecks and facts from this run:\n\n")
		for _, n := range b.notes {
			sb.WriteString("- " + n + "\n")
		}
	}
	if len(b.skipped) > 0 {
		sb.WriteString("\nLeft out in this run:\n\n")
		for _, s := range b.skipped {
			sb.WriteString("- " + s + "\n")
		}
	}
	return os.WriteFile(b.opt.out, []byte(sb.String()), 0o644)
}
