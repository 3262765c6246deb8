package join

import (
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A forked copy gets a copy of the daemon's descriptor table and closes
// every entry of it at its exec (all are close-on-exec): with 500 sessions
// the daemon holds some 1,500 descriptors, and copying and closing them was
// 4–5% of the machine's CPU in a perf profile of 500 concurrent SSH execs
// (filp_flush, dnotify_flush, do_close_on_exec, dup_fd). It grew with every
// session, for every exec.
//
// So the descriptors a copy needs are first put, by dup3(2), on slots that
// sit below a low bound: descriptors made when the first copy was forked,
// while the daemon held few. The copy is forked sharing the daemon's table
// and, as its very first step, unshares it with close_range(bound, ~0,
// CLOSE_RANGE_UNSHARE), which copies only the entries beneath the bound: a
// few dozen, whatever the daemon holds. Once the copy has exec'd (rawVfork
// returns then), the slots are put back on a placeholder.
//
// This takes a fork that shares memory and blocks the daemon's thread until
// the exec (the slots must not change under the copy), and a kernel and a
// seccomp profile that allow close_range's unshare (Linux 5.9): a probe at
// first use decides, and without them every copy gets the whole table, as
// before.

// stagingSlots is how many descriptors the copies in flight can have staged
// at once: about five a session start (stdio, the report pipe), more for a
// copy whose namespace descriptors were opened late. A fork that finds too
// few free slots gets the whole table.
const stagingSlots = 64

type stagingPool struct {
	once   sync.Once
	usable bool
	filler int // /dev/null, the placeholder every free slot holds
	bound  int // every slot, and the filler, is below it

	mu   sync.Mutex
	free []int

	forks atomic.Int64 // copies forked with their descriptors staged
}

var staging stagingPool

func (s *stagingPool) start() {
	if shareMemory == 0 {
		return
	}
	fill, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	s.filler, s.bound = fill, fill+1
	for range stagingSlots {
		fd, err := unix.FcntlInt(uintptr(fill), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			break
		}
		s.free = append(s.free, fd)
		s.bound = max(s.bound, fd+1)
	}
	s.usable = len(s.free) > 0 && probeUnshareBelow(s.bound) == 0
}

// staged is the descriptors of one plan moved onto slots: the plan's fields
// that now name a slot, what they named before, and the slots taken.
type staged struct {
	fields []*int
	olds   []int
	slots  []int
}

// stage moves every descriptor of p at or above the bound onto a slot and
// tells the copy to keep only what lies beneath it. It returns nil, with p
// untouched, where staging is off or too few slots are free.
func (s *stagingPool) stage(p *forkPlan) *staged {
	s.once.Do(s.start)
	if !s.usable {
		return nil
	}
	var fields []*int
	for i := range p.namespaces {
		fields = append(fields, &p.namespaces[i])
	}
	for i := range p.cgroup {
		fields = append(fields, &p.cgroup[i])
	}
	for i := range p.files {
		fields = append(fields, &p.files[i])
	}
	fields = append(fields, &p.report)
	if p.sockets != nil {
		fields = append(fields, &p.sockets.conn)
	}
	need := map[int]int{} // descriptor → its slot
	for _, f := range fields {
		if *f >= s.bound {
			need[*f] = -1
		}
	}
	st := &staged{}
	s.mu.Lock()
	if len(need) > len(s.free) {
		s.mu.Unlock()
		return nil
	}
	for fd := range need {
		slot := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		need[fd] = slot
		st.slots = append(st.slots, slot)
	}
	s.mu.Unlock()
	for fd, slot := range need {
		if err := unix.Dup3(fd, slot, unix.O_CLOEXEC); err != nil {
			s.release(st)
			return nil
		}
	}
	for _, f := range fields {
		if slot, ok := need[*f]; ok {
			st.fields, st.olds = append(st.fields, f), append(st.olds, *f)
			*f = slot
		}
	}
	p.filesBelow = s.bound
	s.forks.Add(1)
	return st
}

// unstage is called once the copy of p has exec'd or exited: p names its
// own descriptors again, and the slots are freed.
func (s *stagingPool) unstage(p *forkPlan, st *staged) {
	if st == nil {
		return
	}
	for i, f := range st.fields {
		*f = st.olds[i]
	}
	p.filesBelow = 0
	s.release(st)
}

// release puts the placeholder back on the slots, which drops the daemon's
// extra references to what they held (a pipe's write end must not outlive
// its owner's close), and frees them.
func (s *stagingPool) release(st *staged) {
	for _, slot := range st.slots {
		unix.Dup3(s.filler, slot, unix.O_CLOEXEC)
	}
	s.mu.Lock()
	s.free = append(s.free, st.slots...)
	s.mu.Unlock()
}

// probeUnshareBelow forks a copy that shares the descriptor table and
// unshares it as forkJoined's copies do, and returns the errno it got.
//
//go:norace
//go:nocheckptr
//go:noinline
func probeUnshareBelow(bound int) syscall.Errno {
	runtime_BeforeFork()
	r1, errno := rawVfork(uintptr(syscall.SIGCHLD|unix.CLONE_FILES) | shareMemory)
	if errno != 0 || r1 != 0 {
		runtime_AfterFork()
		if errno != 0 {
			return errno
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(int(r1), &ws, 0, nil); err != nil {
			return syscall.ECHILD
		}
		if !ws.Exited() {
			return syscall.EINVAL
		}
		return syscall.Errno(ws.ExitStatus())
	}
	runtime_AfterForkInChild()
	_, _, errno = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(bound), uintptr(^uint32(0)), unix.CLOSE_RANGE_UNSHARE)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, uintptr(errno), 0, 0)
	}
}
