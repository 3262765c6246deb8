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

// Write keeps the end of p and what came before it, within the bound.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

// String returns what is kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
