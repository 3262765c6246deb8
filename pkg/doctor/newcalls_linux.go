package doctor

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// A syscallProbe is a call that current C libraries and runtimes make and
// older seccomp profiles deny, with arguments the kernel itself refuses
// (EBADF, EFAULT or EINVAL) before doing anything. Any other answer comes
// from the seccomp filter: EPERM where the profile denies the call, ENOSYS
// where the engine's filter does not name it at all (runc answers ENOSYS for
// every number above the highest one its filter names, so that callers fall
// back; measured with runc 1.1.5 under Docker 20.10's profile).
type syscallProbe struct {
	name  string
	nr    uintptr
	args  [6]uintptr
	since [2]int // the first kernel with the call
	// optional: the kernel may be built without the call, so ENOSYS
	// proves nothing about the filter.
	optional bool
	// newLibseccomp: the call is newer than libseccomp 2.5, so an engine
	// built with 2.5 drops it from any profile (docs/container-flags.md).
	newLibseccomp bool
}

var syscallProbes = []syscallProbe{
	{name: "fchmodat2", nr: unix.SYS_FCHMODAT2, args: [6]uintptr{badFD, 0, 0, 0}, since: [2]int{6, 6}},
	{name: "cachestat", nr: unix.SYS_CACHESTAT, args: [6]uintptr{badFD, 0, 0, 0}, since: [2]int{6, 5}, optional: true},
	{name: "futex_waitv", nr: unix.SYS_FUTEX_WAITV, args: [6]uintptr{0, 0, 1, 0, 0}, since: [2]int{5, 16}},
	{name: "futex_wake", nr: unix.SYS_FUTEX_WAKE, args: [6]uintptr{0, 0, 0, ^uintptr(0)}, since: [2]int{6, 7}},
	{name: "map_shadow_stack", nr: unix.SYS_MAP_SHADOW_STACK, args: [6]uintptr{0, 0, ^uintptr(0)}, since: [2]int{6, 6}, optional: true},
	{name: "statmount", nr: unix.SYS_STATMOUNT, args: [6]uintptr{0, 0, 0, ^uintptr(0)}, since: [2]int{6, 8}, newLibseccomp: true},
	{name: "listmount", nr: unix.SYS_LISTMOUNT, args: [6]uintptr{0, 0, 0, ^uintptr(0)}, since: [2]int{6, 8}, newLibseccomp: true},
	{name: "mseal", nr: unix.SYS_MSEAL, args: [6]uintptr{1, 0, ^uintptr(0)}, since: [2]int{6, 10}, newLibseccomp: true},
}

const badFD = ^uintptr(0) // -1

// A probeAnswer is what one probe got and what that says.
type probeAnswer struct {
	probe   syscallProbe
	errno   unix.Errno
	verdict probeVerdict
}

type probeVerdict int

const (
	callAllowed probeVerdict = iota
	callDenied               // EPERM: the profile denies it
	callUnnamed              // ENOSYS on a kernel that has it: the filter does not name it
	callAbsent               // the kernel lacks it, or may: not judged
)

// judge reads one answer on a kernel of the given version.
func judge(p syscallProbe, errno unix.Errno, kernel [2]int) probeVerdict {
	switch {
	case errno == unix.EPERM:
		return callDenied
	case errno != unix.ENOSYS:
		return callAllowed
	case p.optional || kernelBefore(kernel, p.since):
		return callAbsent
	}
	return callUnnamed
}

func kernelBefore(k, v [2]int) bool { return k[0] < v[0] || k[0] == v[0] && k[1] < v[1] }

// newSyscalls makes each probe and reports those the container's seccomp
// filter refuses. It warns and never fails: the sandbox does not need these
// calls, but the programs an agent runs in it do, and get EPERM or ENOSYS
// where the kernel would have served them.
func newSyscalls() Check {
	kernel := kernelVersion()
	var answers []probeAnswer
	for _, p := range syscallProbes {
		_, _, e := unix.Syscall6(p.nr, p.args[0], p.args[1], p.args[2], p.args[3], p.args[4], p.args[5])
		answers = append(answers, probeAnswer{probe: p, errno: e, verdict: judge(p, e, kernel)})
	}
	return newSyscallsCheck(answers, kernel)
}

const newSyscallsName = "current syscalls (seccomp)"

// newSyscallsCheck words the answers. A call refused with EPERM, or one
// that libseccomp 2.5 knows and the filter leaves out, makes a warning; calls
// newer than libseccomp 2.5 that the filter leaves out while the others pass
// are the engine's, not the profile's, and are only noted.
func newSyscallsCheck(answers []probeAnswer, kernel [2]int) Check {
	var allowed, refused, engine, absent []string
	for _, a := range answers {
		what := fmt.Sprintf("%s → %s", a.probe.name, unix.ErrnoName(a.errno))
		switch {
		case a.verdict == callAllowed:
			allowed = append(allowed, a.probe.name)
		case a.verdict == callAbsent:
			absent = append(absent, what)
		case a.verdict == callUnnamed && a.probe.newLibseccomp:
			engine = append(engine, what)
		default:
			refused = append(refused, what)
		}
	}
	c := Check{Name: newSyscallsName, OK: true}
	var detail []string
	if len(refused) > 0 {
		c.Warn = true
		detail = append(detail, fmt.Sprintf("%s although kernel %d.%d has them: the container's seccomp filter refuses them, and programs that use them fail or lose the feature",
			strings.Join(append(refused, engine...), ", "), kernel[0], kernel[1]))
		c.Fix = "likely an older seccomp profile (images/seccomp.json from before it followed moby/profiles/seccomp, which was Docker 20.10's default, or an engine's own older default): run with the current images/seccomp.json. " +
			"If the profile is current, the engine's libseccomp does not know these calls and drops them whatever the profile says: use an engine whose runc or crun is built with a libseccomp that knows Linux 6.7's calls (2.5.5, or Debian 12's 2.5.4-1+deb12u1), and 2.6.0 for mseal, statmount, listmount"
	} else {
		if len(allowed) > 0 {
			detail = append(detail, strings.Join(allowed, ", ")+" allowed")
		}
		if len(engine) > 0 {
			detail = append(detail, fmt.Sprintf("%s although kernel %d.%d has them: the engine's libseccomp predates them (2.6.0) and leaves them out whatever the profile says; callers fall back",
				strings.Join(engine, ", "), kernel[0], kernel[1]))
		}
	}
	if len(absent) > 0 {
		detail = append(detail, "not judged: "+strings.Join(absent, ", ")+" (the kernel lacks the call or may be built without it)")
	}
	c.Detail = strings.Join(detail, "; ")
	return c
}

// kernelVersion is the running kernel's major and minor version; {0, 0} if
// it cannot be read, which makes every ENOSYS "not judged".
func kernelVersion() [2]int {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return [2]int{}
	}
	var k [2]int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &k[0], &k[1])
	return k
}
