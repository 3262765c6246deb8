package egress

import (
	"container/list"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Answers remembers which addresses the sandbox's resolver (or hosts file)
// gave for which names. Under allowlist a caught connection may go only to an
// address that was answered for an allowed name: an allowed name never opens
// an address by itself, and an IP literal that nobody answered is refused.
// Safe for concurrent use; its memory is bounded by its capacity.
type Answers struct {
	mu    sync.Mutex
	cap   int
	now   func() time.Time
	order *list.List // of *answerEntry, least recently recorded first
	pairs map[answerKey]*answerEntry
	byIP  map[netip.Addr]map[string]*answerEntry
	held  map[netip.Addr]int
	// pinned are the hosts file's pairs: they hold as long as the sandbox
	// and count against no bound (the file's size bounds them).
	pinned map[answerKey]bool
	pinIP  map[netip.Addr][]string
	// recorded, if set, is told every name and its addresses Record or
	// Pin took, after the table's lock is released and before they return
	// (answered.go).
	recorded func(name string, addrs []netip.Addr)
}

type answerKey struct {
	name string
	addr netip.Addr
}

type answerEntry struct {
	answerKey
	expires time.Time
	elem    *list.Element // in Answers.order
}

// DefaultAnswers is how many (name, address) pairs NewAnswers keeps when
// given no capacity: far more than a task resolves, small in memory.
const DefaultAnswers = 1 << 16

// MinAnswerLife is how long an answered address stays open at least, however
// short its TTL: programs cache lookups longer than DNS says (a JVM keeps
// them for the whole run), and a reconnect to the address they kept must
// still pass.
const MinAnswerLife = time.Hour

// NewAnswers makes a table of at most capacity pairs (<= 0 takes
// DefaultAnswers).
func NewAnswers(capacity int) *Answers {
	if capacity <= 0 {
		capacity = DefaultAnswers
	}
	return &Answers{
		cap:    capacity,
		now:    time.Now,
		order:  list.New(),
		pairs:  map[answerKey]*answerEntry{},
		byIP:   map[netip.Addr]map[string]*answerEntry{},
		held:   map[netip.Addr]int{},
		pinned: map[answerKey]bool{},
		pinIP:  map[netip.Addr][]string{},
	}
}

// normalizeAnswerAddr makes the IPv4-mapped form of an address and the
// address itself one key, as a dial to either reaches the same host.
func normalizeAnswerAddr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// Record notes that name was answered with addrs, valid for the longer of ttl
// and MinAnswerLife. name must come from NormalizeHost.
func (t *Answers) Record(name string, addrs []netip.Addr, ttl time.Duration) {
	if t == nil || name == "" {
		return
	}
	life := max(ttl, MinAnswerLife)
	defer t.tell(name, addrs)
	t.mu.Lock()
	defer t.mu.Unlock()
	exp := t.now().Add(life)
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		k := answerKey{name: name, addr: normalizeAnswerAddr(a)}
		if e, ok := t.pairs[k]; ok {
			if exp.After(e.expires) {
				e.expires = exp
			}
			t.order.MoveToBack(e.elem)
			continue
		}
		if len(t.pairs) >= t.cap {
			t.evictLocked()
		}
		e := &answerEntry{answerKey: k, expires: exp}
		e.elem = t.order.PushBack(e)
		t.pairs[k] = e
		m := t.byIP[k.addr]
		if m == nil {
			m = map[string]*answerEntry{}
			t.byIP[k.addr] = m
		}
		m[name] = e
	}
}

// Pin notes that name stands for addrs for the sandbox's whole life, as
// the sandbox's hosts file says: programs read that file themselves and
// never ask the resolver, yet their connections are judged by this table.
func (t *Answers) Pin(name string, addrs []netip.Addr) {
	if t == nil || name == "" {
		return
	}
	defer t.tell(name, addrs)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range addrs {
		k := answerKey{name: name, addr: normalizeAnswerAddr(a)}
		if a.IsValid() && !t.pinned[k] {
			t.pinned[k] = true
			t.pinIP[k.addr] = append(t.pinIP[k.addr], name)
		}
	}
}

// evictLocked drops the least recently recorded pair whose address no open
// connection holds; held pairs met on the way go to the back of the order.
// When every address is held, the oldest pair goes anyway: the bound on
// memory wins over a reconnect.
func (t *Answers) evictLocked() {
	for range t.order.Len() {
		e := t.order.Front().Value.(*answerEntry)
		if t.held[e.addr] == 0 {
			t.deleteLocked(e)
			return
		}
		t.order.MoveToBack(e.elem)
	}
	t.deleteLocked(t.order.Front().Value.(*answerEntry))
}

func (t *Answers) deleteLocked(e *answerEntry) {
	delete(t.pairs, e.answerKey)
	t.order.Remove(e.elem)
	if m := t.byIP[e.addr]; m != nil {
		delete(m, e.name)
		if len(m) == 0 {
			delete(t.byIP, e.addr)
		}
	}
}

// validLocked reports whether a pair still opens its address: not expired,
// or its address is held by an open connection.
func (t *Answers) validLocked(e *answerEntry, now time.Time) bool {
	return now.Before(e.expires) || t.held[e.addr] > 0
}

// NamesOf lists, sorted, the names addr was answered for that are still
// valid.
func (t *Answers) NamesOf(addr netip.Addr) []string {
	if t == nil {
		return nil
	}
	addr = normalizeAnswerAddr(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	out := append([]string(nil), t.pinIP[addr]...)
	for name, e := range t.byIP[addr] {
		if t.validLocked(e, now) && !t.pinned[e.answerKey] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Answered reports whether addr was answered for name and is still valid.
// name must come from NormalizeHost.
func (t *Answers) Answered(name string, addr netip.Addr) bool {
	if t == nil {
		return false
	}
	k := answerKey{name: name, addr: normalizeAnswerAddr(addr)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pinned[k] {
		return true
	}
	e, ok := t.pairs[k]
	return ok && t.validLocked(e, t.now())
}

// Hold keeps every pair of addr valid until release is called, for the
// life of a connection to it: a connection's address stays answered while
// it is open, so a second connection the client opens meanwhile passes too.
// release may be called more than once.
func (t *Answers) Hold(addr netip.Addr) (release func()) {
	if t == nil {
		return func() {}
	}
	addr = normalizeAnswerAddr(addr)
	t.mu.Lock()
	t.held[addr]++
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.held[addr]--; t.held[addr] <= 0 {
				delete(t.held, addr)
			}
		})
	}
}

// Len is how many pairs the table holds, expired ones included until they
// are evicted.
func (t *Answers) Len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pairs)
}
