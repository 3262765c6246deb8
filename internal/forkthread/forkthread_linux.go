// Package forkthread runs forks on one thread that lives as long as the
// process, for children whose parent-death signal must mean the daemon died.
package forkthread

import (
	"runtime"
	"sync"
)

// --die-with-parent and Pdeathsig are PR_SET_PDEATHSIG, which fires when the
// *thread* that forked the child exits (golang/go#27505;
// docs/failures.md#holder-outlives-its-starting-thread). The Go runtime
// retires threads freely, so the holder is forked from a goroutine locked to
// a thread that never exits, and so is every other child armed with a
// parent-death signal (the visitor, through join.Cmd).
var (
	forkerOnce sync.Once
	forkerRuns chan func()
)

// Do runs fn on the forker thread and waits for it.
func Do(fn func()) {
	forkerOnce.Do(func() {
		forkerRuns = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for run := range forkerRuns {
				run()
			}
		}()
	})
	done := make(chan struct{})
	forkerRuns <- func() { fn(); close(done) }
	<-done
}
