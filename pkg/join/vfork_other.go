//go:build !amd64

package join

import "syscall"

// shareMemory is empty where rawVfork has no assembly of its own: the copies
// get copies of the daemon's memory, as fork(2) gives.
const shareMemory = 0

// rawVfork is clone(flags), each process on its own copy of the stack.
//
//go:nosplit
//go:norace
func rawVfork(flags uintptr) (pid uintptr, errno syscall.Errno) {
	pid, _, errno = syscall.RawSyscall6(syscall.SYS_CLONE, flags, 0, 0, 0, 0, 0)
	return pid, errno
}
