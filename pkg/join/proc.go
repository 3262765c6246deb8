package join

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// allPIDs lists the processes visible in the substrate's pid namespace.
func allPIDs() []int {
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

// parentOf reads a process's parent from /proc/PID/stat (the field after the
// parenthesised command name, which may itself hold spaces and parentheses).
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	return ppid, err == nil
}

// Descendants lists every process below root, found by walking parent links.
func Descendants(root int) []int {
	children := map[int][]int{}
	for _, p := range allPIDs() {
		if ppid, ok := parentOf(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// KillTree kills the command and everything it started that is still below
// it (lesson 47): the tree is frozen first, so nothing forks away while it is
// being collected, then killed. Processes that already left the tree (a
// daemon that double-forked on purpose) survive, as they would under Docker.
func (p *Process) KillTree() {
	if p.PID <= 0 {
		return
	}
	stopped := map[int]bool{p.PID: true}
	unix.Kill(p.PID, syscall.SIGSTOP)
	unix.Kill(-p.PID, syscall.SIGSTOP)
	for round := 0; round < 10; round++ {
		grew := false
		for _, c := range Descendants(p.PID) {
			if !stopped[c] {
				stopped[c] = true
				grew = true
				unix.Kill(c, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
		time.Sleep(time.Millisecond)
	}
	unix.Kill(-p.PID, syscall.SIGKILL)
	for pid := range stopped {
		unix.Kill(pid, syscall.SIGKILL)
	}
}
