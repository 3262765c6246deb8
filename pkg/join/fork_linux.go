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
// syscall forks before an exec: it joins the agent's cgroup and the
// namespaces, puts the descriptors in place, and then either takes the enter
// step and execs the agent's command (enter_linux.go), or execs this binary,
// from its sealed copy in memory (Pin), in a child role (the visitor, the
// netns helper). Nothing from the shared filesystem runs as root.
//
// The pid namespace applies to a process's children, not to itself, so when
// it is joined (or a new one is made, for the visitor) the copy forks once
// more with CLONE_PARENT: the second copy is in that pid namespace, is the
// daemon's own child (the daemon waits for it like for any child, and gets
// its exit status directly), and the first copy exits at once after
// reporting the second's pid.

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
	newPIDNS   bool           // make a new pid namespace after joining, and fork again into it
	files      []int          // the child's descriptor i is files[i]
	exe        int            // the child's descriptor holding the binary to exec
	argv, envv []*byte        // NUL-terminated, nil-terminated
	setsid     bool           // a session of its own
	setpgid    bool           // a process group of its own
	pdeathsig  syscall.Signal // sent to the child when the daemon's forking thread ends
	parent     int            // the daemon's pid, to see that it is still there
	report     int            // write end of the report pipe (close-on-exec)
	enter      *enterPlan     // the agent's command to become (nil: exec the binary at exe)
	cgroup     []int          // descriptors of the agent cgroup's join files (tasks or cgroup.procs) to write "0" into
	record     *[2]int32      // what the copy writes on the report pipe
	sockets    *socketPlan    // instead of an exec: make these sockets, pass them back and exit (sockets_linux.go)
	filesBelow int            // > 0: fork sharing the descriptor table and keep only those beneath it (forkfiles_linux.go)
}

// Stages a failure in the forked copy is reported with, as the negative
// first word of a record.
const (
	stageSetns = 1 + iota
	stageUnshare
	stageCgroup
	stageFork
	stageSession
	stageDescriptors
	stageExec
	// The enter step's (enter_linux.go).
	stageTerminal
	stageSeccomp
	stageBound
	stageOOM
	stageNproc
	stageGroups
	stageGID
	stageUID
	stageInheritable
	stageDir
	stageKeyring
	stageSockets
)

var (
	// A kernel sigaction and sigset that are all zero: SIG_DFL, no flags,
	// nothing blocked. Four words cover the struct on amd64 and arm64.
	defaultAction [4]uint64
	emptySigset   uint64

	emptyPath = []byte{0}
	zero      = []byte("0") // written into a cgroup's join file: "this process" (its one thread)
)

// forkJoined forks the copy described by p and returns its pid in the
// parent. Between runtime_BeforeFork and the exec (or exit) the copy may
// only make raw system calls: no allocation, no call that could grow the
// stack, nothing that takes a lock another thread of the parent might have
// held at the fork.
//
// Where rawVfork shares memory (vfork_amd64.go), each copy runs on this very
// frame while the process that forked it sleeps until it execs or exits. So
// a copy never returns from here, writes only to its own plan and to this
// frame's variables, and a process woken from rawVfork uses nothing of the
// frame but rawVfork's results and p, which no copy assigns.
//
//go:norace
//go:nocheckptr
//go:noinline
func forkJoined(p *forkPlan) (pid int, err syscall.Errno) {
	var (
		r1       uintptr
		errno    syscall.Errno
		i        int
		fd       int
		nextfd   int
		stage    int32
		e        *enterPlan
		firstErr syscall.Errno
		argv     **byte // of execSelf
		envv     **byte
		cwd      = unix.AT_FDCWD
		report   = p.report // the copy's own, which it may move
	)
	// Above every descriptor the child receives, so that moving descriptors
	// into place never overwrites one still to be moved.
	nextfd = len(p.files)
	for _, f := range p.files {
		if f >= nextfd {
			nextfd = f + 1
		}
	}
	if report >= nextfd {
		nextfd = report + 1
	}

	flags := uintptr(syscall.SIGCHLD) | shareMemory
	if p.filesBelow > 0 {
		flags |= unix.CLONE_FILES
	}
	runtime_BeforeFork()
	r1, errno = rawVfork(flags)
	if errno != 0 || r1 != 0 {
		runtime_AfterFork()
		return int(r1), errno
	}

	// The forked copy, single-threaded.
	runtime_AfterForkInChild()
	if p.filesBelow > 0 {
		// Before anything else: until this returns, the copy's descriptor
		// table is the daemon's own.
		if _, _, errno = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(p.filesBelow), uintptr(^uint32(0)), unix.CLOSE_RANGE_UNSHARE); errno != 0 {
			stage = stageDescriptors
			goto fail
		}
	}
	for i = 0; i < len(p.cgroup); i++ {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(p.cgroup[i]), uintptr(unsafe.Pointer(&zero[0])), 1); errno != 0 {
			stage = stageCgroup
			goto fail
		}
	}
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
	if p.sockets != nil {
		if errno = makeSockets(p.sockets); errno != 0 {
			stage = stageSockets
			goto fail
		}
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	if p.newPIDNS {
		if _, _, errno = syscall.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWPID, 0, 0); errno != 0 {
			stage = stageUnshare
			goto fail
		}
	}
	if p.pidNS || p.newPIDNS {
		r1, errno = rawVfork(uintptr(unix.CLONE_PARENT|syscall.SIGCHLD) | shareMemory)
		if errno != 0 {
			stage = stageFork
			goto fail
		}
		if r1 != 0 {
			p.record[0], p.record[1] = int32(r1), 0
			// p.report, not report: the second copy ran on this very
			// frame and may have moved its own report descriptor into
			// the variable; this copy's descriptor is still p.report.
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

	// Every signal to its default and none blocked. runtime_AfterForkInChild
	// resets only the handlers Go installed; a signal ignored by whoever
	// started the daemon (SIGHUP under nohup) would stay ignored across the
	// exec, and a session could neither be hung up nor trap it. SIGKILL and
	// SIGSTOP refuse and need nothing. A signal from here to the exec ends
	// the copy, and is reported as the command's death by it: the death the
	// command would have had.
	for i = 1; i <= 64; i++ {
		syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(i), uintptr(unsafe.Pointer(&defaultAction)), 0, 8, 0, 0)
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&emptySigset)), 0, 8, 0, 0)

	// Descriptors into place, as package syscall does it: first move every
	// source that sits below its destination out of the way (and the report
	// pipe, so that it survives), then dup each onto its number, which also
	// clears close-on-exec.
	if report < len(p.files) {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(report), uintptr(nextfd), syscall.O_CLOEXEC); errno != 0 {
			stage = stageDescriptors
			goto fail
		}
		report = nextfd
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

	if p.enter == nil {
		argv, envv = &p.argv[0], &p.envv[0]
		goto execSelf
	}

	// The enter step, in the order enter_linux.go gives.
	e = p.enter
	if e.tty {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, 0, syscall.TIOCSCTTY, 0); errno != 0 {
			stage = stageTerminal
			goto fail
		}
		r1, _, _ = syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
		*e.pgrp = int32(r1)
		if _, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, 0, syscall.TIOCSPGRP, uintptr(unsafe.Pointer(e.pgrp))); errno != 0 {
			stage = stageTerminal
			goto fail
		}
	}
	if _, _, errno = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(e.filter))); errno != 0 {
		stage = stageSeccomp
		goto fail
	}
	for i = 0; i < len(e.dropCaps); i++ {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, e.dropCaps[i], 0); errno != 0 && errno != syscall.EINVAL {
			stage = stageBound
			goto fail
		}
	}
	if e.oomPath != nil {
		r1, _, errno = syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(e.oomPath)), syscall.O_WRONLY|syscall.O_CLOEXEC, 0, 0, 0)
		if errno == 0 {
			_, _, errno = syscall.RawSyscall(syscall.SYS_WRITE, r1, uintptr(unsafe.Pointer(&e.oomValue[0])), uintptr(len(e.oomValue)))
			syscall.RawSyscall(syscall.SYS_CLOSE, r1, 0, 0)
		}
		if errno != 0 {
			stage = stageOOM
			goto fail
		}
	}
	if e.nproc != nil {
		if _, _, errno = syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NPROC, uintptr(unsafe.Pointer(e.nproc)), 0, 0, 0); errno != 0 {
			stage = stageNproc
			goto fail
		}
	}
	// Per-thread calls (syscall.Setgroups and the like stop the world to run
	// on every thread): this copy has one thread, and it execs. Groups and
	// gid first, while still privileged; uid last.
	if len(e.groups) > 0 {
		_, _, errno = syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(e.groups)), uintptr(unsafe.Pointer(&e.groups[0])), 0)
	} else {
		_, _, errno = syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0)
	}
	if errno != 0 {
		stage = stageGroups
		goto fail
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(e.gid), uintptr(e.gid), uintptr(e.gid)); errno != 0 {
		stage = stageGID
		goto fail
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(e.uid), uintptr(e.uid), uintptr(e.uid)); errno != 0 {
		stage = stageUID
		goto fail
	}
	// No inheritable or ambient capability survives the exec: a root
	// command's permitted set is the bounding set, a user's is empty.
	if _, _, errno = syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(e.capHeader)), uintptr(unsafe.Pointer(e.capData)), 0); errno != 0 {
		stage = stageInheritable
		goto fail
	}
	e.capData[0].Inheritable, e.capData[1].Inheritable = 0, 0
	if _, _, errno = syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(e.capHeader)), uintptr(unsafe.Pointer(e.capData)), 0); errno != 0 {
		stage = stageInheritable
		goto fail
	}
	if _, _, errno = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); errno != 0 {
		stage = stageInheritable
		goto fail
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(e.dir)), 0, 0); errno != 0 {
		stage = stageDir
		goto fail
	}
	// A session keyring of its own, so that the daemon's (and on a bare
	// machine the host's) is out of reach. Where seccomp forbids keyctl
	// (Docker's profile does), no keyring is reachable at all.
	if _, _, errno = syscall.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 && errno != syscall.EPERM && errno != syscall.ENOSYS && errno != syscall.EACCES {
		stage = stageKeyring
		goto fail
	}
	if e.self {
		// A role of this binary, with the enter plan's argv and environment.
		argv, envv = &e.argv[0], &e.envv[0]
		goto execSelf
	}
	// As execvp: a candidate that is missing is skipped, one that may not be
	// run is remembered and skipped, anything else ends the search.
	for i = 0; i < len(e.candidates); i++ {
		_, _, errno = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(e.candidates[i])),
			uintptr(unsafe.Pointer(&e.argv[0])), uintptr(unsafe.Pointer(&e.envv[0])))
		if errno == syscall.ENOENT || errno == syscall.ENOTDIR {
			continue
		}
		if firstErr == 0 {
			firstErr = errno
		}
		if errno != syscall.EACCES {
			break
		}
	}
	errno = syscall.ENOENT
	if firstErr != 0 {
		errno = firstErr
	}
	stage = stageExec
	goto fail

execSelf:
	_, _, errno = syscall.RawSyscall6(unix.SYS_EXECVEAT, uintptr(p.exe),
		uintptr(unsafe.Pointer(&emptyPath[0])),
		uintptr(unsafe.Pointer(argv)), uintptr(unsafe.Pointer(envv)),
		unix.AT_EMPTY_PATH, 0)
	stage = stageExec

fail:
	p.record[0], p.record[1] = -stage, int32(errno)
	// report, not p.report: the descriptor move may have put another of the
	// child's descriptors on p.report's number and the pipe on report's.
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(report), uintptr(unsafe.Pointer(p.record)), 8)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, ExitSetup, 0, 0)
	}
}
