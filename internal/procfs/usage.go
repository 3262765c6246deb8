package procfs

import (
	"fmt"
	"os"
)

// Usage is what a set of processes uses now.
type Usage struct {
	MemoryBytes int64   // the sum of their resident sets
	CPUSeconds  float64 // their CPU time and that of the children they waited for
	Processes   int
}

// UsageInPIDNamespace sums the usage of every process in the pid namespace
// that pid is in (the sandbox's, by its pid 1), for where no cgroup counts
// it. Processes that ended and were reaped by no process of the namespace
// are not counted: a sum over /proc cannot see them.
func UsageInPIDNamespace(pid int) (Usage, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("the sandbox's pid namespace: %w", err)
	}
	page := int64(os.Getpagesize())
	var u Usage
	var ticks uint64
	for _, p := range PIDs() {
		if other, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); err != nil || other != ns {
			continue
		}
		st, err := ReadStat(p)
		if err != nil {
			continue // it ended meanwhile
		}
		u.Processes++
		u.MemoryBytes += st.RSSPages * page
		ticks += st.CPUTicks
	}
	u.CPUSeconds = float64(ticks) / TicksPerSecond
	return u, nil
}
