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
	"runtime"
	"sync"
)

// Begin makes the runtime hold at least n OS threads, by keeping n
// goroutines each locked to a thread of its own at once, and returns the
// wait for them all to have let go. The threads stay, parked, for later
// blocking calls. They are made in the background: serve's start goes on
// meanwhile, as they need only exist before the agent's first program runs.
//
// A goroutine that locks its thread and then waits parks the thread with
// it, and the runtime starts another thread at once for whatever is to run
// next. For 64 threads that is 5.7-8.5 ms of CPU here, little of it in
// clone(2): each park, and each release after it, hands the P to another
// thread with a futex wake and a sleep (test/bench's ready note has the
// profile). Goroutines in a blocking system call instead get a new thread only when the runtime's
// monitor next takes their P away, one every 20 µs or much later on a
// loaded machine (12 ms and more of serve's start).
func Begin(n int) (wait func()) {
	release := make(chan struct{})
	var locked, done sync.WaitGroup
	locked.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
			// Unlocked before it returns: a goroutine that ends locked
			// takes its thread with it.
			runtime.UnlockOSThread()
		}()
	}
	go func() {
		locked.Wait()
		close(release)
	}()
	return done.Wait
}
