package join

import (
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// syscall.ForkLock is held for writing across a fork so that no descriptor
// made by another thread without close-on-exec leaks into the child. Taken
// per fork, it also made every start wait for the one before it to reach
// its exec, joins of seven namespaces and the enter step included: with 100
// sessions starting at once, the daemon's threads queued on it while a core
// stood idle. As package syscall has done for its own forks since Go 1.21,
// concurrent forks share one hold of the write lock, taken by the first and
// released by the last. A run of shared holds ends after maxSharedForks, so
// that a reader waiting for ForkLock is never held off for good.
const maxSharedForks = 64

var forking = struct {
	mu     sync.Mutex
	ended  sync.Cond
	n      int // forks in progress under the current hold
	shared int // forks that have taken part in the current hold
}{}

func init() { forking.ended.L = &forking.mu }

// forkTurns admits forks GOMAXPROCS at a time, in the order they asked: a
// fork blocks its thread until the copy execs, and with hundreds of sessions
// starting at once, forks let in as they came made the slowest exec of a
// run wait 3× as long as the median (100 and 500 sessions, make bench),
// where one at a time in order had kept it to 1.3×. Goroutines blocked on a
// full channel are woken first come, first served.
var forkTurns = make(chan struct{}, runtime.GOMAXPROCS(0))

// forkAdmit waits for a fork's turn; forkDone gives it back.
func forkAdmit() { forkTurns <- struct{}{} }
func forkDone()  { <-forkTurns }

// forkInTurn forks the copy of p in its turn, under the shared ForkLock,
// with its descriptors staged where that is possible (forkfiles_linux.go).
func forkInTurn(p *forkPlan) (pid int, errno syscall.Errno) {
	forkAdmit()
	defer forkDone()
	forkBegin()
	defer forkEnd()
	st := staging.stage(p)
	defer staging.unstage(p, st)
	return forkJoined(p)
}

// forkBegin is called before a fork, forkEnd once the copy has exec'd or
// exited (rawVfork returns then).
func forkBegin() {
	forking.mu.Lock()
	for forking.shared >= maxSharedForks {
		forking.ended.Wait()
	}
	if forking.n == 0 {
		// No fork holds the lock: nobody calls forkEnd until this one does,
		// so waiting for it under forking.mu blocks only other forks.
		syscall.ForkLock.Lock()
	}
	forking.n++
	forking.shared++
	forking.mu.Unlock()
}

func forkEnd() {
	forking.mu.Lock()
	forking.n--
	if forking.n == 0 {
		syscall.ForkLock.Unlock()
		forking.shared = 0
		forking.ended.Broadcast()
	}
	forking.mu.Unlock()
}

// reportPipe is the pipe a forked copy reports on: close-on-exec at both
// ends, and a read end in the runtime's poller, so that the goroutine
// waiting for the report parks instead of holding an OS thread in read(2)
// (each such block cost a thread hand-off and woke the runtime's monitor).
func reportPipe() (r *os.File, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	return os.NewFile(uintptr(p[0]), "join-report"), p[1], nil
}

// awaitExit parks the calling goroutine until the child pid has exited,
// without reaping it, on a pidfd in the runtime's poller. os.Process.Wait
// blocks an OS thread in waitid(2) for the whole life of the command: with
// a hundred short commands at once, that was a thread hand-off per start
// and per exit. Where a pidfd cannot be had (kernels before 5.3), it
// returns at once and Wait blocks as before.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		// WNOWAIT leaves the child to Process.Wait, which then returns at
		// once; a pidfd opened non-blocking answers EAGAIN while it runs.
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT, nil)
		return err != unix.EAGAIN
	})
}
