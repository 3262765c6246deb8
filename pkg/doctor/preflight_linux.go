package doctor

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// preflight reads, without bwrap, each runtime restriction that would stop
// the sandbox, so that doctor names every missing flag at once instead of
// only the first one bwrap trips over (docs/container-flags.md, "detect
// without bwrap").
func preflight() []Check {
	var out []Check
	if seccompDenies() {
		c := checkFor("namespaces (seccomp)")
		c.Detail = "setns(-1, 0) and mount(NULL, …) answer EPERM instead of EBADF/EFAULT: a seccomp profile denies namespaces and mounts"
		out = append(out, c)
	}
	if under := mountsUnderProc(); len(under) > 0 {
		c := checkFor("fresh /proc (masked paths)")
		c.Detail = "paths under /proc are masked or read-only mounts (" + strings.Join(under, " ") + "), so a fresh proc mount is refused as too revealing"
		out = append(out, c)
	}
	if label := appArmorLabel(); label != "" && label != "unconfined" {
		c := checkFor("mount (AppArmor)")
		c.Detail = "confined by the AppArmor profile " + label
		out = append(out, c)
	}
	if !hasCaps(Runtime.Capabilities) {
		c := checkFor("identity map (CAP_SETFCAP)")
		c.Detail = "the container lacks CAP_SETUID, CAP_SETGID or CAP_SETFCAP, which writing the identity map needs"
		out = append(out, c)
	}
	return out
}

// checkFor is the not-ok Check named name, with its fix from runtimeFlags.
func checkFor(name string) Check {
	for _, f := range runtimeFlags {
		if f.name == name {
			return Check{Name: name, Fix: f.fix}
		}
	}
	return Check{Name: name}
}

// seccompDenies calls syscalls with arguments the kernel itself rejects with
// EBADF or EFAULT; EPERM can then only come from a seccomp filter.
func seccompDenies() bool {
	_, _, e1 := unix.Syscall(unix.SYS_SETNS, ^uintptr(0), 0, 0)
	_, _, e2 := unix.Syscall6(unix.SYS_MOUNT, 0, 0, 0, 0, 0, 0)
	return e1 == unix.EPERM || e2 == unix.EPERM
}

// mountsUnderProc lists mount points below /proc, as Docker's masks make them.
func mountsUnderProc() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], "/proc/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// appArmorLabel is this process's AppArmor confinement, "" without AppArmor.
func appArmorLabel() string {
	for _, p := range []string{"/proc/self/attr/apparmor/current", "/proc/self/attr/current"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		label := strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
		if label == "" {
			continue
		}
		if _, err := os.Stat("/sys/module/apparmor"); err != nil {
			return "" // an SELinux or other label, or no LSM
		}
		return label
	}
	return ""
}

// hasCaps reports whether every capability bit is in this process's
// effective set.
func hasCaps(caps []Capability) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return true
			}
			for _, c := range caps {
				if eff&(1<<c.Bit) == 0 {
					return false
				}
			}
			return true
		}
	}
	return true
}
