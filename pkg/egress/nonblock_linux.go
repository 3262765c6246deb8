package egress

import "syscall"

// nonblock opens snapshot files without blocking on a FIFO planted there.
const nonblock = syscall.O_NONBLOCK
