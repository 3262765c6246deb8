package egress

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
)

// tell passes name and addrs to the table's recorded hook, if any.
func (t *Answers) tell(name string, addrs []netip.Addr) {
	if t.recorded != nil {
		t.recorded(name, addrs)
	}
}

// answeredRules keeps the rules' answered set (netrules.Plan.Answered)
// in step with the table: every address answered for a name that some
// phase allows goes into the set before the answer leaves, once, so that
// a connection to any other address is refused before its handshake
// (ECONNREFUSED) and one to such an address reaches the listener, which
// judges it by whoever made it.
type answeredRules struct {
	pols []Policy
	add  func(ctx context.Context, addrs []netip.Addr) error
	ctx  context.Context
	log  *slog.Logger

	mu   sync.Mutex // held while adding: a second asker waits for the first
	sent map[netip.Addr]bool
}

// recorded is the Answers hook.
func (r *answeredRules) recorded(name string, addrs []netip.Addr) {
	allowed := false
	for _, p := range r.pols {
		allowed = allowed || p.AllowsHost(name)
	}
	if !allowed {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var fresh []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() && !r.sent[a] {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		return
	}
	if err := r.add(r.ctx, fresh); err != nil {
		// The address stays refused before the handshake (closed, not
		// open); the next answer that names it tries again.
		r.log.Error("add answered addresses to the sandbox's rules", "addrs", fresh, "err", err)
		return
	}
	for _, a := range fresh {
		r.sent[a] = true
	}
}
