package join

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// shareMemory makes the forked copies share the daemon's memory until they
// exec or exit (vfork): no copy of the daemon's page tables per exec, and no
// copy-on-write faults in the daemon afterwards, which grew with every
// concurrent session.
const shareMemory = unix.CLONE_VM | unix.CLONE_VFORK

// rawVfork is clone(flags) on the caller's stack (vfork_amd64.s).
func rawVfork(flags uintptr) (pid uintptr, errno syscall.Errno)
