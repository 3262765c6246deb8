package join

import (
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/procfs"
	"golang.org/x/sys/unix"
)

// Descendants lists every process below root, found by walking parent links.
func Descendants(root int) []int {
	children := map[int][]int{}
	for _, p := range procfs.PIDs() {
		if st, err := procfs.ReadStat(p); err == nil {
			children[st.PPID] = append(children[st.PPID], p)
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
// it (docs/failures.md#timeout-kills-the-whole-tree): the tree is frozen
// first, so nothing forks away while it is being collected, then killed.
// Processes that already left the tree (a
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
