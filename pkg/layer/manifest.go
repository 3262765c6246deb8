package layer

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/pkg/task"
)

// Manifest is adapt's account of a run (design: "adapt"): one entry per task
// adapted, one per group image, one per task refused. It is the one JSON
// document `adapt --json` prints.
type Manifest struct {
	Version string       `json:"sandboxd_version"`
	Engine  string       `json:"engine,omitempty"`
	Out     string       `json:"out,omitempty"` // --out: contexts written here, nothing built
	Tasks   []TaskEntry  `json:"tasks"`
	Groups  []GroupEntry `json:"groups"`
	Errors  []ErrorEntry `json:"errors"`
}

// TaskEntry is one adapted task.
type TaskEntry struct {
	Name       string    `json:"name"`
	Dir        string    `json:"dir"`
	Image      string    `json:"image"`       // the task's own tag: `docker run` it to serve the task
	GroupImage string    `json:"group_image"` // the shared image; needs SANDBOXD_TASK when it carries several tasks
	Digest     string    `json:"digest,omitempty"`
	RepoDigest string    `json:"repo_digest,omitempty"` // after --push
	Timeouts   Timeouts  `json:"timeouts"`
	Resources  Resources `json:"resources"`
	Network    Networks  `json:"network"`
	Peers      []Peer    `json:"peers,omitempty"`
	Compose    string    `json:"compose,omitempty"` // the compose file that runs it with its sidecars
	// HarborTools is its group's: which of the tools Harbor's agents expect
	// the image had, and which adapt added, for baselines to compare.
	HarborTools []ToolEntry `json:"harbor_tools,omitempty"`
	Warnings    []string    `json:"warnings,omitempty"`
}

// Timeouts are the task's, in seconds; 0 = none.
type Timeouts struct {
	AgentSec    float64 `json:"agent_sec"`
	VerifierSec float64 `json:"verifier_sec"`
	BuildSec    float64 `json:"build_sec"`
}

// Resources are what the runner should give the container; 0 = not declared.
type Resources struct {
	CPUs      float64  `json:"cpus"`
	MemoryMB  int64    `json:"memory_mb"`
	StorageMB int64    `json:"storage_mb"`
	GPUs      int64    `json:"gpus"`
	GPUTypes  []string `json:"gpu_types,omitempty"`
}

// Networks are the per-phase policies the image enforces.
type Networks struct {
	Agent    Network `json:"agent"`
	Verifier Network `json:"verifier"`
}

// Network is one phase's policy.
type Network struct {
	Mode         string   `json:"mode"`
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
}

// Peer is a sidecar offered inside the sandbox.
type Peer struct {
	Name   string `json:"name"`
	Port   int    `json:"port"`
	Target string `json:"target"`
}

// GroupEntry is one group image.
type GroupEntry struct {
	Name      string   `json:"name"`
	Image     string   `json:"image"`
	Hash      string   `json:"hash"`
	Tasks     []string `json:"tasks"`
	Base      string   `json:"base"`              // where the base came from
	BaseID    string   `json:"base_id,omitempty"` // the base image adapt built or took
	ToolsID   string   `json:"tools_id,omitempty"`
	Installed []string `json:"installed,omitempty"` // packages adapt added (bubblewrap, Harbor's agent tools)
	// HarborTools says per tool Harbor's agents expect what the base had and
	// what adapt added (docs/adapt.md, "Harbor's agent tools").
	HarborTools  []ToolEntry    `json:"harbor_tools,omitempty"`
	ToolsSeconds float64        `json:"tools_seconds,omitempty"` // the tools install's wall time
	ToolsBytes   int64          `json:"tools_bytes,omitempty"`   // what the tools install added to the base
	Digest       string         `json:"digest,omitempty"`
	RepoDigest   string         `json:"repo_digest,omitempty"`
	LayerBytes   int64          `json:"layer_bytes,omitempty"` // what adapt added over the base
	Assembly     string         `json:"assembly,omitempty"`    // "load" or "build"
	Sidecars     []SidecarEntry `json:"sidecars,omitempty"`
	Context      string         `json:"context,omitempty"` // --out: the group's build contexts
	Seconds      float64        `json:"seconds"`
	Error        string         `json:"error,omitempty"`
}

// SidecarEntry is a compose service adapt built or kept.
type SidecarEntry struct {
	Service string `json:"service"`
	Image   string `json:"image"`
	Built   bool   `json:"built"`
}

// ErrorEntry is a task that was not adapted.
type ErrorEntry struct {
	Dir   string `json:"dir"`
	Name  string `json:"name,omitempty"`
	Error string `json:"error"`
}

// OK reports whether every task given was adapted.
func (m *Manifest) OK() bool { return len(m.Errors) == 0 }

func (m *Manifest) fail(dir, name string, err error) {
	m.Errors = append(m.Errors, ErrorEntry{Dir: dir, Name: name, Error: err.Error()})
}

func taskEntry(it *Item, g *Group) TaskEntry {
	t := it.Task
	net := func(n task.Network) Network { return Network{Mode: string(n.Mode), AllowedHosts: n.AllowedHosts} }
	e := TaskEntry{
		Name:       t.Name,
		Dir:        it.Dir,
		Image:      it.Image,
		GroupImage: g.Image,
		Timeouts: Timeouts{
			AgentSec:    t.Agent.Timeout.Seconds(),
			VerifierSec: t.Verifier.Timeout.Seconds(),
			BuildSec:    t.Environment.BuildTimeout.Seconds(),
		},
		Resources: Resources{
			CPUs: t.Environment.CPUs, MemoryMB: t.Environment.MemoryMB, StorageMB: t.Environment.StorageMB,
			GPUs: t.Environment.GPUs, GPUTypes: t.Environment.GPUTypes,
		},
		Network:  Networks{Agent: net(t.AgentNetwork()), Verifier: net(t.VerifierNetwork())},
		Warnings: it.Warnings,
	}
	for _, p := range t.Sandboxd.Peers {
		e.Peers = append(e.Peers, Peer(p))
	}
	if g.Compose != nil {
		for _, p := range g.Compose.Peers() {
			e.Peers = append(e.Peers, Peer(p))
		}
	}
	return e
}

// sortEntries puts tasks, groups and errors in name order, so that the
// manifest does not depend on which group finished first.
func (m *Manifest) sortEntries() {
	sort.Slice(m.Tasks, func(i, j int) bool { return m.Tasks[i].Image < m.Tasks[j].Image })
	sort.Slice(m.Groups, func(i, j int) bool { return m.Groups[i].Name < m.Groups[j].Name })
	sort.SliceStable(m.Errors, func(i, j int) bool { return m.Errors[i].Dir < m.Errors[j].Dir })
}

// WriteTable prints the summary: one line per task, adapted or not, then the
// groups with their size and time.
func (m *Manifest) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tIMAGE\tGROUP\tRESULT")
	groupOf := map[string]string{}
	for _, g := range m.Groups {
		for _, t := range g.Tasks {
			groupOf[t] = g.Name
		}
	}
	for _, t := range m.Tasks {
		result := "ok"
		if m.Out != "" {
			result = "context written"
		}
		if len(t.Warnings) > 0 {
			result += fmt.Sprintf(" (%d warnings)", len(t.Warnings))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Image, groupOf[t.Name], result)
	}
	for _, e := range m.Errors {
		name := e.Name
		if name == "" {
			name = e.Dir
		}
		fmt.Fprintf(tw, "%s\t-\t-\tFAILED: %s\n", name, firstLine(e.Error))
	}
	tw.Flush()
	if len(m.Groups) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTASKS\tBASE\tADDED\tHARBOR TOOLS\tTIME\tRESULT")
	for _, g := range m.Groups {
		result := "ok"
		if g.Error != "" {
			result = "FAILED"
		}
		added := "-"
		if g.LayerBytes > 0 {
			added = fmt.Sprintf("%.1f MB", float64(g.LayerBytes)/1e6)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.1fs\t%s\n", g.Name, len(g.Tasks), g.Base, added, harborSummary(g.HarborTools), g.Seconds, result)
	}
	tw.Flush()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
