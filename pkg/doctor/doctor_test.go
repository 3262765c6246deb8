package doctor

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

// A join that seccomp forbids is named with its flag, in the words of
// nsenter and in those of sandboxd's own join (pkg/join)
// (docs/failures.md#doctor-names-the-missing-flag).
func TestDoctorNamesTheSetnsFlag(t *testing.T) {
	for _, msg := range []string{
		"nsenter: reassociate to namespace 'ns/user' failed: Operation not permitted",
		"could not join the sandbox's namespaces (operation not permitted): the sandbox may have ended; see sandboxd status",
	} {
		c := classify(errors.New(msg))
		assert.Equal(t, "setns (seccomp)", c.Name, msg)
		assert.Contains(t, c.Fix, "images/seccomp.json", msg)
	}
}

// ENOSYS on a kernel that has the call comes from the engine's filter (runc
// answers it for numbers above the highest its filter names); on an older
// kernel, or for a call a kernel may be built without, it proves nothing.
func TestDoctorJudgesSyscallProbes(t *testing.T) {
	probe := func(name string) syscallProbe {
		for _, p := range syscallProbes {
			if p.name == name {
				return p
			}
		}
		t.Fatalf("no probe %s", name)
		return syscallProbe{}
	}
	for _, c := range []struct {
		call   string
		errno  unix.Errno
		kernel [2]int
		want   probeVerdict
	}{
		{"fchmodat2", unix.EFAULT, [2]int{6, 18}, callAllowed},
		{"fchmodat2", unix.EBADF, [2]int{6, 6}, callAllowed},
		{"fchmodat2", unix.EPERM, [2]int{6, 18}, callDenied},
		{"fchmodat2", unix.ENOSYS, [2]int{6, 18}, callUnnamed},
		{"fchmodat2", unix.ENOSYS, [2]int{6, 5}, callAbsent},
		{"fchmodat2", unix.ENOSYS, [2]int{5, 10}, callAbsent},
		{"futex_waitv", unix.EINVAL, [2]int{6, 1}, callAllowed},
		{"cachestat", unix.ENOSYS, [2]int{6, 18}, callAbsent},
		{"cachestat", unix.EPERM, [2]int{6, 18}, callDenied},
		{"map_shadow_stack", unix.ENOSYS, [2]int{6, 18}, callAbsent},
		{"mseal", unix.ENOSYS, [2]int{6, 18}, callUnnamed},
		{"mseal", unix.ENOSYS, [2]int{6, 9}, callAbsent},
	} {
		assert.Equal(t, c.want, judge(probe(c.call), c.errno, c.kernel), "%s %v on %v", c.call, c.errno, c.kernel)
	}

	answer := func(name string, e unix.Errno, k [2]int) probeAnswer {
		p := probe(name)
		return probeAnswer{probe: p, errno: e, verdict: judge(p, e, k)}
	}
	k := [2]int{6, 18}
	// Docker 20.10's profile under runc 1.1.5 (measured).
	old := newSyscallsCheck([]probeAnswer{
		answer("fchmodat2", unix.ENOSYS, k), answer("futex_waitv", unix.EINVAL, k),
		answer("futex_wake", unix.ENOSYS, k), answer("mseal", unix.ENOSYS, k),
	}, k)
	assert.True(t, old.OK, "a warning, never a failure")
	assert.True(t, old.Warn)
	assert.Contains(t, old.Detail, "fchmodat2 → ENOSYS")
	assert.Contains(t, old.Detail, "mseal → ENOSYS")
	assert.NotContains(t, old.Detail, "futex_waitv →")
	assert.Contains(t, old.Fix, "images/seccomp.json")
	assert.Contains(t, old.Fix, "libseccomp")
	// The current profile under an engine whose libseccomp predates mseal.
	cur := newSyscallsCheck([]probeAnswer{
		answer("fchmodat2", unix.EFAULT, k), answer("futex_wake", unix.EINVAL, k), answer("mseal", unix.ENOSYS, k),
	}, k)
	assert.True(t, cur.OK)
	assert.False(t, cur.Warn)
	assert.Contains(t, cur.Detail, "libseccomp")
	// A profile that answers EPERM warns even for the newest calls.
	perm := newSyscallsCheck([]probeAnswer{answer("fchmodat2", unix.EFAULT, k), answer("statmount", unix.EPERM, k)}, k)
	assert.True(t, perm.Warn)
	assert.Contains(t, perm.Detail, "statmount → EPERM")
}
