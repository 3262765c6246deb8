package join

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
)

const (
	roleEnter = "enter"
	statusOK  = "ok"
	// Descriptors the enter child receives (see Cmd).
	fdSelf   = 3
	fdSpec   = 4
	fdStatus = 5
)

func init() { childproc.Add(roleEnter, enter) }

// enter runs inside every namespace of the sandbox, as root of its user
// namespace with every capability there, and turns itself into the command.
// Every per-thread attribute (bounding set, seccomp filter, credentials) is
// set on the thread that execs, which stays locked.
//
// Security-sensitive: after any change run, as root,
// go test ./pkg/join/ ./internal/daemon/ -run 'Lesson|Escape|NonRoot|User'.
func enter(_ []string) int {
	runtime.LockOSThread()
	status := os.NewFile(fdStatus, "status")
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(status, "%d %s\n", code, fmt.Sprintf(format, args...))
		return code
	}
	var s enterSpec
	raw, err := io.ReadAll(os.NewFile(fdSpec, "spec"))
	if err != nil {
		return fail(ExitSetup, "read session spec: %v", err)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return fail(ExitSetup, "decode session spec: %v", err)
	}
	// Nothing of ours may reach the command: not this binary, not the spec,
	// not the status pipe.
	if err := unix.CloseRange(fdSelf, fdSpec, 0); err != nil {
		return fail(ExitSetup, "close inherited descriptors: %v", err)
	}
	if err := unix.CloseRange(fdStatus+1, ^uint(0), 0); err != nil {
		return fail(ExitSetup, "close inherited descriptors: %v", err)
	}
	unix.CloseOnExec(fdStatus)

	// A session of its own, so that no terminal of the daemon's is the
	// command's, and signals and kills reach the whole command and nothing
	// of ours. With a terminal, that terminal becomes its controlling one.
	if _, err := unix.Setsid(); err != nil {
		return fail(ExitSetup, "setsid: %v", err)
	}
	if s.TTY {
		if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
			return fail(ExitSetup, "make the pty the controlling terminal: %v", err)
		}
		if err := unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpid()); err != nil {
			return fail(ExitSetup, "make the session the terminal's foreground group: %v", err)
		}
	}
	if err := forbidUserNamespaces(); err != nil {
		return fail(ExitSetup, "forbid nested user namespaces: %v", err)
	}
	if err := boundCaps(s.Caps); err != nil {
		return fail(ExitSetup, "bound capabilities: %v", err)
	}
	if s.Limits.OOMScoreAdj != 0 {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(s.Limits.OOMScoreAdj)), 0); err != nil {
			return fail(ExitSetup, "set oom_score_adj: %v", err)
		}
	}
	if s.Limits.MaxProcs > 0 && s.UID != 0 {
		lim := unix.Rlimit{Cur: s.Limits.MaxProcs, Max: s.Limits.MaxProcs}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return fail(ExitSetup, "set the process limit: %v", err)
		}
	}
	// Per-thread system calls, not syscall.Setgroups/Setresgid/Setresuid:
	// Go makes those all-threads calls (stop the world, signal every thread
	// to repeat the call, spin until each has had a CPU), which were ~60% of
	// this step's CPU on a busy machine. Only this thread's credentials
	// matter: it has been locked since the top of enter, it is the thread
	// that execs below, and execve keeps the calling thread's credentials and
	// ends every other thread. Nothing from here to the exec hands work to
	// another thread (the access checks in lookPath and the chdir run on this
	// one, as the user); if the exec fails the process exits. Groups and gid
	// first, while still privileged; uid last.
	var groups *uint32
	if len(s.Groups) > 0 {
		groups = &s.Groups[0]
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(s.Groups)), uintptr(unsafe.Pointer(groups)), 0); errno != 0 {
		return fail(ExitSetup, "set supplementary groups %v: %v", s.Groups, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(s.GID), uintptr(s.GID), uintptr(s.GID)); errno != 0 {
		return fail(ExitSetup, "set gid %d: %v (is it inside the sandbox's id map?)", s.GID, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(s.UID), uintptr(s.UID), uintptr(s.UID)); errno != 0 {
		return fail(ExitSetup, "set uid %d: %v (is it inside the sandbox's id map?)", s.UID, errno)
	}
	if err := clearInheritable(); err != nil {
		return fail(ExitSetup, "clear inheritable capabilities: %v", err)
	}
	// The directory is resolved here, inside the sandbox and as the user
	// (lesson 7): never by the daemon, which would open it in the substrate.
	if err := unix.Chdir(s.Dir); err != nil {
		return fail(ExitSetup, "cannot use working directory %s: %v; create it or choose another with -w", s.Dir, err)
	}
	name := s.Argv[0]
	if s.Path != "" {
		name = s.Path
	}
	path, code, err := lookPath(name, s.Env)
	if err != nil {
		return fail(code, "%v", err)
	}
	// A session keyring of its own: the daemon's (and the host's, on a bare
	// machine) must not be reachable from the sandbox. Where a seccomp
	// profile forbids keyctl (Docker's does), the agent cannot reach any
	// keyring either, and there is nothing to do.
	// A NULL name asks for a new anonymous keyring.
	if _, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 && errno != unix.EPERM && errno != unix.ENOSYS && errno != unix.EACCES {
		return fail(ExitSetup, "new session keyring: %v", errno)
	}
	fmt.Fprintln(status, statusOK)
	err = unix.Exec(path, s.Argv, s.Env)
	// The status pipe is gone (close-on-exec did not fire since exec failed,
	// but the reader has stopped reading): report like env(1) does.
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	if err == unix.ENOENT {
		return ExitNotFound
	}
	return ExitNotRunnable
}

// lookPath resolves name with the PATH of the command's own environment.
func lookPath(name string, env []string) (string, int, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", codeFor(err), fmt.Errorf("%s: %v", name, err)
		}
		return name, 0, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var firstErr error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := executable(p)
		if err == nil {
			return p, 0, nil
		}
		if firstErr == nil && err != unix.ENOENT {
			firstErr = err
		}
	}
	if firstErr != nil {
		return "", ExitNotRunnable, fmt.Errorf("%s: %v", name, firstErr)
	}
	return "", ExitNotFound, fmt.Errorf("%s: command not found in PATH %s", name, path)
}

func executable(p string) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.EISDIR
	}
	return unix.Access(p, unix.X_OK)
}

func codeFor(err error) int {
	if err == unix.ENOENT {
		return ExitNotFound
	}
	return ExitNotRunnable
}

// boundCaps drops every capability outside keep from the bounding set, so
// that neither root nor a setuid binary can regain it.
func boundCaps(keep []string) error {
	allowed := map[int]bool{}
	for _, name := range keep {
		n, ok := capNumbers[strings.ToUpper(name)]
		if !ok {
			return fmt.Errorf("unknown capability %q", name)
		}
		allowed[n] = true
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if allowed[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return nil
}

// clearInheritable leaves a root command's permitted set to the bounding
// set: no inheritable or ambient capability survives exec.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return err
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	var n int
	if _, err := fmt.Sscan(string(b), &n); err != nil {
		return 63
	}
	return n
}

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

// forbidUserNamespaces installs a seccomp filter that refuses new user
// namespaces, as Docker's default profile does: uniform for bwrap 0.4.1
// (no --disable-userns) and 0.8, and inherited by everything the command
// starts. Every ABI the kernel accepts on this architecture gets the same
// rules (a 32-bit `int 0x80` must not be a way around them). clone3 gets
// ENOSYS because its flags live behind a pointer that a filter cannot read;
// libc then falls back to clone, whose flags it can.
func forbidUserNamespaces() error {
	prog := userNamespaceFilter(abis)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return errno
	}
	return nil
}

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
