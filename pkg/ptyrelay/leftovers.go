package ptyrelay

import (
	"os"
	"sync"
	"time"
)

// Leftovers reads and discards the output of background processes after
// their session is over. A command like `srv &` leaves srv holding the
// session's stdout; closing our end would kill srv with SIGPIPE at its next
// log line, yet the sandbox, not the session, is the lifetime boundary
// (docs/failures.md#background-processes-outlive-their-command). One
// goroutine per adopted pipe runs until its last writer is gone or Close is
// called. Beyond Max pipes, new ones are closed
// instead: memory stays bounded, and those writers see EPIPE as they would
// under sshd after the client left.
type Leftovers struct {
	Max int // pipes kept at once; 0 means 256

	mu     sync.Mutex
	files  map[*os.File]struct{}
	closed bool
	wg     sync.WaitGroup
}

// adopt takes ownership of f.
func (l *Leftovers) adopt(f *os.File) {
	l.mu.Lock()
	max := l.Max
	if max <= 0 {
		max = 256
	}
	if l.closed || len(l.files) >= max {
		l.mu.Unlock()
		f.Close()
		return
	}
	if l.files == nil {
		l.files = map[*os.File]struct{}{}
	}
	l.files[f] = struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	go l.discard(f)
}

func (l *Leftovers) discard(f *os.File) {
	defer l.wg.Done()
	f.SetReadDeadline(time.Time{})
	buf := make([]byte, 16<<10)
	for {
		if _, err := f.Read(buf); err != nil {
			break
		}
	}
	l.mu.Lock()
	delete(l.files, f)
	l.mu.Unlock()
	f.Close()
}

// Len is the number of pipes being drained.
func (l *Leftovers) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.files)
}

// Close stops draining: background writers get EPIPE from then on. It
// returns once every drain goroutine has ended.
func (l *Leftovers) Close() {
	l.mu.Lock()
	l.closed = true
	for f := range l.files {
		f.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
