// Package tail keeps the end of what a helper process printed, for the
// error message that reports its failure: the end is where a program says
// why it stopped, and a bound keeps a chatty helper from growing the daemon.
package tail

import "sync"

// Buffer keeps the last bytes written to it, up to its bound. It is safe for
// a writer (exec's stderr copier) and a reader at once.
type Buffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

// Write keeps the end of p and what came before it, within the bound. The
// kept bytes move to the front of one buffer of the bound's size, so that a
// stream relayed through it (a session's stdout) allocates nothing per
// write once the buffer is full.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if n >= t.max {
		t.buf = append(t.buf[:0], p[n-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + n - t.max; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns what is kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
