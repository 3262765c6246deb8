package egress

import (
	"container/list"
	"net"
	"sync"
)

// gate bounds a proxy's concurrent connections. A connection that has not
// yet been granted anything is evictable: when the bound is reached, the
// oldest such connection is closed to make room. Otherwise a flood of idle
// connections (the agent's background processes on the visitor port, which
// it cannot authenticate to) could lock out the verifier, which has a token.
type gate struct {
	mu      sync.Mutex
	max     int
	n       int       // admitted and not yet left; may pass max briefly while evicted ones wind down
	waiting list.List // of net.Conn not yet granted, oldest first
}

// ticket is one admitted connection's place at the gate.
type ticket struct {
	g *gate
	e *list.Element
}

// enter admits c, evicting the oldest ungranted connection if the gate is
// full; it fails only when every admitted connection has been granted.
func (g *gate) enter(c net.Conn) (*ticket, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= g.max {
		oldest := g.waiting.Front()
		if oldest == nil {
			return nil, false
		}
		g.waiting.Remove(oldest)
		oldest.Value.(net.Conn).Close() // its goroutine leaves the gate as it ends
	}
	g.n++
	return &ticket{g: g, e: g.waiting.PushBack(c)}, true
}

// granted makes the connection safe from eviction.
func (t *ticket) granted() {
	t.g.mu.Lock()
	t.g.waiting.Remove(t.e) // a no-op once removed
	t.g.mu.Unlock()
}

// leave frees the connection's place.
func (t *ticket) leave() {
	t.g.mu.Lock()
	t.g.waiting.Remove(t.e)
	t.g.n--
	t.g.mu.Unlock()
}
