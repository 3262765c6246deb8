package join

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
)

// The enter step: what turns a process joined into the sandbox's namespaces
// into the agent's command. It runs in the forked copy (fork_linux.go), as
// root of the sandbox's user namespace with every capability there, with raw
// system calls only, in this order:
//
//   - a session of its own; with a terminal, that terminal becomes its
//     controlling one and the session its foreground group;
//   - a seccomp filter that refuses new user namespaces;
//   - the bounding set cut to the session's capabilities;
//   - the agent's limits (oom_score_adj, RLIMIT_NPROC for a non-root user);
//   - supplementary groups, gid, uid; inheritable and ambient sets cleared;
//   - the working directory, resolved inside the sandbox as the user
//     (docs/failures.md#working-directory-resolved-inside-the-sandbox), never
//     by the daemon, which would open it in the substrate;
//   - a session keyring of its own;
//   - execve of each PATH candidate in turn, as execvp does, with exactly
//     the environment given; or, for a Spec.Role, execveat of the pinned
//     binary at descriptor 3.
//
// Everything it needs is prepared here, in the daemon, before the fork.
//
// Security-sensitive: after any change run, as root,
// go test ./pkg/join/ ./internal/daemon/ ./internal/reaper/ ./test/attack/ -run 'Escape|NonRoot|User|Join|Blanked|Exec|Background|NoHarness|Reaper|Stop|Crash|Workdir|DaemonStaysRoot|VerifierEnv|VerifierInstalls|AgentServer|PublicStill|NoNetworkHasNoProxy|AgentCannot|PeerReached'.
type enterPlan struct {
	tty        bool
	filter     *unix.SockFprog
	dropCaps   []uintptr // capabilities to drop from the bounding set
	oomPath    *byte     // /proc/self/oom_score_adj, or nil
	oomValue   []byte
	nproc      *unix.Rlimit // RLIMIT_NPROC, or nil
	groups     []uint32
	uid, gid   uint32
	capHeader  *unix.CapUserHeader
	capData    *[2]unix.CapUserData
	dir        *byte
	candidates []*byte // paths to try, in order
	self       bool    // exec this binary (the descriptor at 3) in a role instead
	argv, envv []*byte
	pgrp       *int32 // scratch for TIOCSPGRP

	// For the messages of a failure.
	name, dirName, pathList string
	slash                   bool
}

// planEnter prepares the enter step for spec.
func planEnter(s Spec, limits Limits) (*enterPlan, error) {
	if s.Role != "" {
		s.Path, s.Argv, s.Env = "", append([]string{"sandboxd-" + s.Role}, s.Argv...), childproc.Environ(s.Role)
	}
	if len(s.Argv) == 0 {
		return nil, &SetupError{Code: ExitSetup, Msg: "no command given: name the program to run"}
	}
	caps := s.Caps
	if caps == nil {
		caps = DefaultCaps
	}
	drop, err := capsToDrop(caps)
	if err != nil {
		return nil, &SetupError{Code: ExitSetup, Msg: err.Error()}
	}
	e := &enterPlan{
		tty:       s.TTY,
		dropCaps:  drop,
		groups:    s.User.Groups,
		uid:       s.User.UID,
		gid:       s.User.GID,
		capHeader: &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3},
		capData:   new([2]unix.CapUserData),
		pgrp:      new(int32),
		dirName:   s.Dir,
		self:      s.Role != "",
	}
	if e.dirName == "" {
		e.dirName = "/"
	}
	e.filter = namespaceFilter()
	if limits.OOMScoreAdj != 0 {
		e.oomPath = bytePtr("/proc/self/oom_score_adj")
		e.oomValue = []byte(strconv.Itoa(limits.OOMScoreAdj))
	}
	if limits.MaxProcs > 0 && s.User.UID != 0 {
		e.nproc = &unix.Rlimit{Cur: limits.MaxProcs, Max: limits.MaxProcs}
	}
	if e.dir, err = syscall.BytePtrFromString(e.dirName); err != nil {
		return nil, &SetupError{Code: ExitSetup, Msg: fmt.Sprintf("working directory %q: %v", e.dirName, err)}
	}

	e.name = s.Argv[0]
	if s.Path != "" {
		e.name = s.Path
	}
	e.pathList = childproc.DefaultPath
	for _, kv := range s.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			e.pathList = v
		}
	}
	var paths []string
	if e.self {
		// No candidates: the binary is the descriptor.
	} else if strings.Contains(e.name, "/") {
		e.slash = true
		paths = []string{e.name}
	} else {
		for _, dir := range filepath.SplitList(e.pathList) {
			if dir == "" {
				dir = "."
			}
			paths = append(paths, filepath.Join(dir, e.name))
		}
	}
	for _, p := range paths {
		b, err := syscall.BytePtrFromString(p)
		if err != nil {
			return nil, &SetupError{Code: ExitNotFound, Msg: fmt.Sprintf("%q: %v", p, err)}
		}
		e.candidates = append(e.candidates, b)
	}
	if e.argv, err = syscall.SlicePtrFromStrings(s.Argv); err != nil {
		return nil, &SetupError{Code: ExitSetup, Msg: fmt.Sprintf("command line: %v", err)}
	}
	if e.envv, err = syscall.SlicePtrFromStrings(s.Env); err != nil {
		return nil, &SetupError{Code: ExitSetup, Msg: fmt.Sprintf("environment: %v", err)}
	}
	return e, nil
}

func bytePtr(s string) *byte {
	b, _ := syscall.BytePtrFromString(s)
	return b
}

// failure says what went wrong at stage, like env(1) and docker run do.
func (e *enterPlan) failure(stage int32, errno syscall.Errno) *SetupError {
	setup := func(format string, args ...any) *SetupError {
		return &SetupError{Code: ExitSetup, Msg: fmt.Sprintf(format, args...)}
	}
	switch stage {
	case stageTerminal:
		return setup("make the pty the session's controlling terminal: %v", errno)
	case stageSeccomp:
		return setup("forbid nested user namespaces: %v", errno)
	case stageBound:
		return setup("bound capabilities: %v", errno)
	case stageOOM:
		return setup("set oom_score_adj: %v", errno)
	case stageNproc:
		return setup("set the process limit: %v", errno)
	case stageGroups:
		return setup("set supplementary groups %v: %v", e.groups, errno)
	case stageGID:
		return setup("set gid %d: %v (is it inside the sandbox's id map?)", e.gid, errno)
	case stageUID:
		return setup("set uid %d: %v (is it inside the sandbox's id map?)", e.uid, errno)
	case stageInheritable:
		return setup("clear inheritable capabilities: %v", errno)
	case stageDir:
		return setup("cannot use working directory %s: %v; create it or choose another with -w", e.dirName, errno)
	case stageKeyring:
		return setup("new session keyring: %v", errno)
	case stageExec:
		switch {
		case errno == unix.ENOENT && !e.slash:
			return &SetupError{Code: ExitNotFound, Msg: fmt.Sprintf("%s: command not found in PATH %s", e.name, e.pathList)}
		case errno == unix.ENOENT:
			return &SetupError{Code: ExitNotFound, Msg: fmt.Sprintf("%s: %v", e.name, errno)}
		default:
			return &SetupError{Code: ExitNotRunnable, Msg: fmt.Sprintf("%s: %v", e.name, errno)}
		}
	}
	return nil
}

// namespaceFilter is userNamespaceFilter for this machine's ABIs, built once.
var namespaceFilter = sync.OnceValue(func() *unix.SockFprog {
	prog := userNamespaceFilter(abis)
	return &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
})

// capsToDrop lists every capability outside keep, up to the kernel's last,
// so that neither root nor a setuid binary can regain it.
func capsToDrop(keep []string) ([]uintptr, error) {
	allowed := map[int]bool{}
	for _, name := range keep {
		n, ok := capNumbers[strings.ToUpper(name)]
		if !ok {
			return nil, fmt.Errorf("unknown capability %q", name)
		}
		allowed[n] = true
	}
	var drop []uintptr
	for c := 0; c <= lastCap(); c++ {
		if !allowed[c] {
			drop = append(drop, uintptr(c))
		}
	}
	return drop, nil
}

// lastCap is the kernel's highest capability number.
var lastCap = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	var n int
	if _, err := fmt.Sscan(string(b), &n); err != nil {
		return 63
	}
	return n
})

var capNumbers = map[string]int{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
	"CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
	"CAP_LINUX_IMMUTABLE": 9, "CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11,
	"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15,
	"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19,
	"CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21, "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23,
	"CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25, "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27,
	"CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29, "CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
	"CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
	"CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37, "CAP_PERFMON": 38, "CAP_BPF": 39,
	"CAP_CHECKPOINT_RESTORE": 40,
}

// userNamespaceFilter is a seccomp filter that refuses new user namespaces,
// as Docker's default profile does: uniform for bwrap 0.4.1 (no
// --disable-userns) and 0.8, and inherited by everything the command starts.
// Every ABI the kernel accepts on this architecture gets the same rules (a
// 32-bit `int 0x80` must not be a way around them). clone3 gets ENOSYS
// because its flags live behind a pointer that a filter cannot read; libc
// then falls back to clone, whose flags it can.
// abi is one system call ABI: its audit arch and the numbers that matter.
type abi struct {
	arch                   uint32
	unshare, clone, clone3 uint32
	refuseAbove            uint32 // numbers at or above this are another ABI (x32)
}

func userNamespaceFilter(abis []abi) []unix.SockFilter {
	const (
		retAllow = unix.SECCOMP_RET_ALLOW
		retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		retNOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		offNR    = 0
		offArch  = 4
		offArg0  = 16 // low 32 bits of args[0] (little-endian)
		blockLen = 11
	)
	ld := func(k uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: k}
	}
	jmp := func(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }

	prog := []unix.SockFilter{ld(offArch)}
	n := len(abis)
	for i, a := range abis {
		k := len(prog)
		target := 1 + n + 1 + i*blockLen
		prog = append(prog, jmp(unix.BPF_JEQ, a.arch, uint8(target-(k+1)), 0))
	}
	prog = append(prog, ret(retAllow))
	for _, a := range abis {
		prog = append(prog,
			ld(offNR),
			jmp(unix.BPF_JGE, a.refuseAbove, 0, 1),
			ret(retNOSYS),
			jmp(unix.BPF_JEQ, a.clone3, 0, 1),
			ret(retNOSYS),
			jmp(unix.BPF_JEQ, a.unshare, 1, 0),
			jmp(unix.BPF_JEQ, a.clone, 0, 3),
			ld(offArg0),
			jmp(unix.BPF_JSET, unix.CLONE_NEWUSER, 0, 1),
			ret(retEPERM),
			ret(retAllow),
		)
	}
	return prog
}
