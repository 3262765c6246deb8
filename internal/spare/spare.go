// Package spare makes the OS threads the daemon will need before the agent
// can use up the processes they would come from.
//
// Without a cgroup of its own, a root agent shares the container's pid
// limit with the daemon, and root is exempt from RLIMIT_NPROC: a fork bomb
// can take every pid there is. The Go runtime makes an OS thread whenever
// every thread it has is busy in a system call, and when it cannot, the
// whole process dies ("failed to create new OS thread"). Threads the runtime
// made once stay parked when idle and are reused, so making them at start,
// while pids are free, turns that crash into sessions that fail one by one
// with a message (docs/failures.md#a-fork-bomb-does-not-end-serve).
package spare

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Threads makes the runtime hold at least n OS threads, by keeping n
// goroutines in a blocking system call at once, and returns once they have
// all come back. The threads stay, parked, for later blocking calls.
func Threads(n int) error {
	before := threadCount()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(fds[0])
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			started.Done()
			// A blocking read of our own pipe: the runtime hands this
			// thread's P on and makes another thread for the next one.
			var b [1]byte
			unix.Read(fds[0], b[:])
		}()
	}
	started.Wait()
	// Let every reader reach its read before they are released: the
	// runtime's own threads are there already.
	want := before + n
	for range 100 {
		if threadCount() >= want {
			break
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 1_000_000}, nil)
	}
	// Closing the write end ends every read at once.
	unix.Close(fds[1])
	done.Wait()
	return nil
}

// threadCount is how many threads this process has.
func threadCount() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), "\nThreads:")
	line, _, _ := strings.Cut(rest, "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(line))
	return n
}
