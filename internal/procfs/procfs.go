// Package procfs reads the processes that /proc shows: their pids, the
// fields of /proc/PID/stat that sandboxd acts on, and this process's thread
// count.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PIDs lists the processes visible in this pid namespace.
func PIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Stat is what sandboxd reads of /proc/PID/stat.
type Stat struct {
	State byte // R, S, D, Z, T, …
	PPID  int
	// Start is when the process started, in clock ticks after boot.
	Start uint64
	// ArgStart and ArgEnd bound the argv area, what /proc/PID/cmdline
	// shows (0 unless the reader may ptrace the process).
	ArgStart, ArgEnd uint64
	// CPUTicks is the CPU time of the process and of the children it has
	// waited for (utime+stime+cutime+cstime), in clock ticks.
	CPUTicks uint64
	// RSSPages is its resident set, in pages.
	RSSPages int64
}

// TicksPerSecond is the kernel's USER_HZ, the unit of /proc/PID/stat's
// times: 100 on every Linux architecture sandboxd runs on.
const TicksPerSecond = 100

// ReadStat reads /proc/PID/stat. The command name sits in parentheses and
// may itself hold spaces and parentheses, so the fields are counted from
// the last ')'.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, errors.New("procfs: no command name in " + strconv.Itoa(pid) + "/stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("procfs: short /proc/%d/stat", pid)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: /proc/%d/stat: %w", pid, err)
	}
	st := Stat{State: f[0][0], PPID: ppid}
	// Fields 14 to 17 of stat(5), counted from the state (field 3).
	if len(f) > 14 {
		for _, v := range f[11:15] {
			n, _ := strconv.ParseUint(string(v), 10, 64)
			st.CPUTicks += n
		}
	}
	// Field 22 of stat(5), counted from the state (field 3).
	if len(f) > 19 {
		st.Start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	}
	// Field 24.
	if len(f) > 21 {
		st.RSSPages, _ = strconv.ParseInt(string(f[21]), 10, 64)
	}
	// Fields 48 and 49 of stat(5), counted from the state (field 3).
	if len(f) > 46 {
		st.ArgStart, _ = strconv.ParseUint(string(f[45]), 10, 64)
		st.ArgEnd, _ = strconv.ParseUint(string(f[46]), 10, 64)
	}
	return st, nil
}

// Threads is how many threads this process has (0 when /proc cannot say).
func Threads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), "\nThreads:")
	line, _, _ := strings.Cut(rest, "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(line))
	return n
}
