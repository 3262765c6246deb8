package join

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// done reports whether ch is closed within a generous bound; a false answer
// means the goroutine behind it is blocked.
func done(ch <-chan struct{}, wait time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(wait):
		return false
	}
}

// Concurrent forks share one hold of syscall.ForkLock: a second fork does
// not wait for the first to exec, descriptors made without close-on-exec
// stay out of every fork in progress, and the lock is free once the last
// has ended (docs/failures.md#forks-do-not-queue-behind-each-other).
func TestForksShareTheForkLock(t *testing.T) {
	forkBegin()
	second := make(chan struct{})
	go func() { forkBegin(); close(second) }()
	require.True(t, done(second, 10*time.Second), "a second fork waited for the first")
	assert.False(t, syscall.ForkLock.TryRLock(), "ForkLock readable during forks")
	forkEnd()
	assert.False(t, syscall.ForkLock.TryRLock(), "ForkLock readable while a fork is in progress")
	forkEnd()
	require.True(t, syscall.ForkLock.TryRLock(), "ForkLock still held after the last fork")
	syscall.ForkLock.RUnlock()
}

// A run of shared holds ends: after maxSharedForks, a fork waits until the
// current ones have ended, and a reader that was waiting for ForkLock gets it
// before that fork does.
func TestASharedForkLockLetsReadersIn(t *testing.T) {
	for range maxSharedForks {
		forkBegin()
	}
	reader, readerDone := make(chan struct{}), make(chan struct{})
	go func() {
		syscall.ForkLock.RLock()
		close(reader)
		<-readerDone
		syscall.ForkLock.RUnlock()
	}()
	late := make(chan struct{})
	go func() { forkBegin(); close(late) }()
	assert.False(t, done(late, 200*time.Millisecond), "a fork past maxSharedForks joined the hold")
	for range maxSharedForks {
		forkEnd()
	}
	require.True(t, done(reader, 10*time.Second), "the reader never got ForkLock")
	assert.False(t, done(late, 200*time.Millisecond), "a fork took ForkLock while a reader held it")
	close(readerDone)
	require.True(t, done(late, 10*time.Second), "the late fork never started")
	forkEnd()
	require.True(t, syscall.ForkLock.TryRLock())
	syscall.ForkLock.RUnlock()
}
