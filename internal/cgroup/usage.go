package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is what a group's processes use and have used.
type Usage struct {
	MemoryBytes     int64
	MemoryPeakBytes int64 // 0 where the kernel keeps no peak (v2 before Linux 5.19)
	CPUSeconds      float64
	Processes       int
}

// Usage reads the group's counters: v2's memory.current, memory.peak,
// cpu.stat and pids.current, or v1's memory.usage_in_bytes,
// memory.max_usage_in_bytes, cpuacct.usage and pids.current. A group
// without all three of memory, CPU and pids counters (v1 with no cpuacct
// hierarchy of its own, say) is an error: the caller counts otherwise.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	var mem, cpu, pids bool
	for _, dir := range g.dirs {
		read := func(name string) (int64, bool) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return 0, false
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n, err == nil
		}
		if n, ok := read("memory.current"); ok {
			u.MemoryBytes, mem = n, true
		} else if n, ok := read("memory.usage_in_bytes"); ok {
			u.MemoryBytes, mem = n, true
		}
		if n, ok := read("memory.peak"); ok {
			u.MemoryPeakBytes = n
		} else if n, ok := read("memory.max_usage_in_bytes"); ok {
			u.MemoryPeakBytes = n
		}
		if n, ok := read("pids.current"); ok {
			u.Processes, pids = int(n), true
		}
		if n, ok := read("cpuacct.usage"); ok {
			u.CPUSeconds, cpu = float64(n)/1e9, true
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						u.CPUSeconds, cpu = float64(n)/1e6, true
					}
				}
			}
		}
	}
	if !mem || !cpu || !pids {
		return u, fmt.Errorf("cgroup: the group counts memory %v, CPU %v, pids %v: not all three", mem, cpu, pids)
	}
	return u, nil
}
