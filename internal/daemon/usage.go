package daemon

import (
	"github.com/sandboxd/sandboxd/internal/procfs"
)

// Usage is what the agent's processes use (status.usage): from the
// agent's cgroup where serve could make one, else summed over the
// sandbox's processes in /proc.
type Usage struct {
	MemoryBytes int64 `json:"memory_bytes"`
	// MemoryPeakBytes is the cgroup's own peak; summed over /proc, the
	// highest total any status has seen (a peak between two looks is
	// missed).
	MemoryPeakBytes int64   `json:"memory_peak_bytes"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	Processes       int     `json:"processes"`
	Source          string  `json:"source"` // cgroup or procfs
	Error           string  `json:"error,omitempty"`
}

func (d *Daemon) usage() *Usage {
	if d.cgroup != nil {
		if u, err := d.cgroup.Usage(); err == nil {
			return &Usage{MemoryBytes: u.MemoryBytes, MemoryPeakBytes: d.peak(u.MemoryBytes, u.MemoryPeakBytes), CPUSeconds: u.CPUSeconds, Processes: u.Processes, Source: "cgroup"}
		}
	}
	u, err := procfs.UsageInPIDNamespace(d.holder.PID)
	if err != nil {
		return &Usage{Source: "procfs", Error: err.Error()}
	}
	return &Usage{MemoryBytes: u.MemoryBytes, MemoryPeakBytes: d.peak(u.MemoryBytes, 0), CPUSeconds: u.CPUSeconds, Processes: u.Processes, Source: "procfs"}
}

// peak keeps the highest memory total seen, for a source without a peak
// of its own.
func (d *Daemon) peak(now, kept int64) int64 {
	for {
		seen := d.memoryPeak.Load()
		top := max(seen, now, kept)
		if top == seen || d.memoryPeak.CompareAndSwap(seen, top) {
			return top
		}
	}
}
