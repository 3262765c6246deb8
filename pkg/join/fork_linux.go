package join

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Joining a user and a mount namespace takes a single-threaded process
// (setns(2) refuses a caller that shares its filesystem context with other
// threads), and the Go runtime is never single-threaded. util-linux's nsenter
// can do it, but it is dynamically linked: run as the container's root long
// after the agent has had the run of the filesystem both share, it would load
// the agent's /etc/ld.so.preload or a libc the agent rewrote. So the daemon
// forks a copy of itself that makes raw system calls only, the way package
// syscall forks before an exec: it joins the namespaces, puts the
// descriptors in place and execs this binary, from the descriptor opened at
// start, in a child role. Nothing from the shared filesystem is executed.
//
// The pid namespace applies to a process's children, not to itself, so when
// it is joined the copy forks once more with CLONE_PARENT: the second copy
// is in the sandbox's pid namespace, is the daemon's own child (the daemon
// waits for it like for any child, and gets its exit status directly), and
// the first copy exits at once after reporting the second's pid.

// The hooks package syscall itself uses around fork: BeforeFork blocks
// signals and marks the stack so that growing it would fail loudly;
// AfterForkInChild resets signal handlers and the mask for the exec.
//
//go:linkname runtime_BeforeFork syscall.runtime_BeforeFork
func runtime_BeforeFork()

//go:linkname runtime_AfterFork syscall.runtime_AfterFork
func runtime_AfterFork()

//go:linkname runtime_AfterForkInChild syscall.runtime_AfterForkInChild
func runtime_AfterForkInChild()

// forkPlan is everything the forked copy needs, prepared before the fork so
// that the copy allocates nothing.
type forkPlan struct {
	namespaces []int          // descriptors of /proc/HOLDER/ns/*, joined in order
	pidNS      bool           // one of them is the pid namespace: fork again
	files      []int          // the child's descriptor i is files[i]
	exe        int            // the child's descriptor holding the binary to exec
	argv, envv []*byte        // NUL-terminated, nil-terminated
	setsid     bool           // a session of its own
	setpgid    bool           // a process group of its own
	pdeathsig  syscall.Signal // sent to the child when the daemon's forking thread ends
	parent     int            // the daemon's pid, to see that it is still there
	report     int            // write end of the report pipe (close-on-exec)
	record     *[2]int32      // what the copy writes on the report pipe
}

// Stages a failure in the forked copy is reported with, as the negative
// first word of a record.
const (
	stageSetns = 1 + iota
	stageFork
	stageSession
	stageDescriptors
	stageExec
)

var emptyPath = []byte{0}

// forkJoined forks the copy described by p and returns its pid in the
// parent. Between runtime_BeforeFork and the exec (or exit) the copy may
// only make raw system calls: no allocation, no call that could grow the
// stack, nothing that takes a lock another thread of the parent might have
// held at the fork.
//
//go:norace
//go:nocheckptr
//go:noinline
func forkJoined(p *forkPlan) (pid int, err syscall.Errno) {
	var (
		r1     uintptr
		errno  syscall.Errno
		i      int
		fd     int
		nextfd int
		stage  int32
	)
	// Above every descriptor the child receives, so that moving descriptors
	// into place never overwrites one still to be moved.
	nextfd = len(p.files)
	for _, f := range p.files {
		if f >= nextfd {
			nextfd = f + 1
		}
	}
	if p.report >= nextfd {
		nextfd = p.report + 1
	}

	runtime_BeforeFork()
	r1, _, errno = syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || r1 != 0 {
		runtime_AfterFork()
		return int(r1), errno
	}

	// The forked copy, single-threaded.
	runtime_AfterForkInChild()
	if p.pdeathsig != 0 {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(p.pdeathsig), 0); errno != 0 {
			stage = stageSession
			goto fail
		}
		// The daemon may have died before the signal was armed.
		if r1, _, _ = syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); int(r1) != p.parent {
			stage = stageSession
			goto fail
		}
	}
	for i = 0; i < len(p.namespaces); i++ {
		_, _, errno = syscall.RawSyscall(unix.SYS_SETNS, uintptr(p.namespaces[i]), 0, 0)
		if errno != 0 {
			stage = stageSetns
			goto fail
		}
	}
	if p.pidNS {
		r1, _, errno = syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(unix.CLONE_PARENT|syscall.SIGCHLD), 0, 0, 0, 0, 0)
		if errno != 0 {
			stage = stageFork
			goto fail
		}
		if r1 != 0 {
			p.record[0], p.record[1] = int32(r1), 0
			syscall.RawSyscall(syscall.SYS_WRITE, uintptr(p.report), uintptr(unsafe.Pointer(p.record)), 8)
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
		}
		// The second copy: in the sandbox's pid namespace, the daemon's
		// child (whose pid it cannot see from there).
		if p.pdeathsig != 0 {
			if _, _, errno = syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(p.pdeathsig), 0); errno != 0 {
				stage = stageSession
				goto fail
			}
		}
	}
	if p.setsid {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); errno != 0 {
			stage = stageSession
			goto fail
		}
	} else if p.setpgid {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0); errno != 0 {
			stage = stageSession
			goto fail
		}
	}

	// Descriptors into place, as package syscall does it: first move every
	// source that sits below its destination out of the way (and the report
	// pipe, so that it survives), then dup each onto its number, which also
	// clears close-on-exec.
	if p.report < len(p.files) {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(p.report), uintptr(nextfd), syscall.O_CLOEXEC); errno != 0 {
			stage = stageDescriptors
			goto fail
		}
		p.report = nextfd
		nextfd++
	}
	for i = 0; i < len(p.files); i++ {
		if p.files[i] < i {
			if _, _, errno = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(p.files[i]), uintptr(nextfd), syscall.O_CLOEXEC); errno != 0 {
				stage = stageDescriptors
				goto fail
			}
			p.files[i] = nextfd
			nextfd++
		}
	}
	for i = 0; i < len(p.files); i++ {
		fd = p.files[i]
		if fd == i {
			_, _, errno = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFD, 0)
		} else {
			_, _, errno = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(fd), uintptr(i), 0)
		}
		if errno != 0 {
			stage = stageDescriptors
			goto fail
		}
	}

	_, _, errno = syscall.RawSyscall6(unix.SYS_EXECVEAT, uintptr(p.exe),
		uintptr(unsafe.Pointer(&emptyPath[0])),
		uintptr(unsafe.Pointer(&p.argv[0])), uintptr(unsafe.Pointer(&p.envv[0])),
		unix.AT_EMPTY_PATH, 0)
	stage = stageExec

fail:
	p.record[0], p.record[1] = -stage, int32(errno)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(p.report), uintptr(unsafe.Pointer(p.record)), 8)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, ExitSetup, 0, 0)
	}
}
