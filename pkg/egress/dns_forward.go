package egress

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSForwarder asks the daemon's own name servers (those of the substrate's
// resolv.conf, as SnapshotResolver took them at start) the sandbox's
// questions, byte for byte, and keeps their answers for as long as their
// TTLs say. It never returns later than its deadline: a resolver that lets
// a client time out reads as a broken network, while SERVFAIL makes every
// client give up or move on at once.
type DNSForwarder struct {
	// Servers are host:port, asked in order until one answers.
	Servers []string
	// Timeout bounds one server's answer; Deadline the whole exchange.
	// Zero takes 1.5 s and 3 s, below glibc's and dig's 5 s.
	Timeout, Deadline time.Duration
	// MaxEntries and MaxBytes bound the cache (0: 4096 and 8 MiB).
	MaxEntries, MaxBytes int

	mu    sync.Mutex
	calls map[cacheKey]*dnsCall // questions on their way to a server
	cache map[cacheKey]*cacheEntry
	lru   *list.List // of *cacheEntry, least recently used first
	bytes int
	now   func() time.Time
}

// cacheKey is a question as the cache tells them apart: the flags that
// change an answer's content are part of it.
type cacheKey struct {
	name         string // the question's name as on the wire, in ASCII lower case
	qtype        dnsmessage.Type
	qclass       dnsmessage.Class
	rd, cd, edns bool
	dnssecOK     bool
}

// dnsCall is one question on its way to the servers, which later askers
// of the same question wait for instead of asking again.
type dnsCall struct {
	done chan struct{}
	resp []byte
	err  error
}

type cacheEntry struct {
	key     cacheKey
	msg     []byte
	ttls    []ttlField
	stored  time.Time
	expires time.Time
	elem    *list.Element
}

// Bounds of the cache's TTLs: no answer is kept longer than a day, whatever
// it says, and a negative answer with no SOA is not kept at all.
const maxCacheTTL = 24 * 60 * 60

func (f *DNSForwarder) init() {
	if f.cache == nil {
		f.calls = map[cacheKey]*dnsCall{}
		f.cache = map[cacheKey]*cacheEntry{}
		f.lru = list.New()
		if f.now == nil {
			f.now = time.Now
		}
	}
}

func keyOf(q *dnsQuery) cacheKey {
	return cacheKey{name: lowerASCII(q.raw[dnsHeaderLen : q.qEnd-4]), qtype: q.q.Type, qclass: q.q.Class, rd: q.rd, cd: q.cd, edns: q.edns, dnssecOK: q.dnssecOK}
}

// cached is the cache's answer to q with q's ID, question spelling and the
// TTLs it has left, or nil.
func (f *DNSForwarder) cached(q *dnsQuery) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	e, ok := f.cache[keyOf(q)]
	if !ok {
		return nil
	}
	now := f.now()
	if !now.Before(e.expires) {
		f.dropLocked(e)
		return nil
	}
	f.lru.MoveToBack(e.elem)
	out := forClient(e.msg, q)
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, t := range e.ttls {
		binary.BigEndian.PutUint32(out[t.off:], t.ttl-min(age, t.ttl))
	}
	return out
}

// forClient is a copy of msg, an answer to q's question, with q's ID and
// the question as q's client spelled it (resolvers that randomize the case
// of names check it; names compressed against it follow).
func forClient(msg []byte, q *dnsQuery) []byte {
	out := append(make([]byte, 0, len(msg)), msg...)
	binary.BigEndian.PutUint16(out, q.id)
	copy(out[dnsHeaderLen:q.qEnd], q.raw[dnsHeaderLen:q.qEnd])
	return out
}

// store keeps resp, the upstream's answer to q, if it may be kept.
func (f *DNSForwarder) store(q *dnsQuery, resp []byte) {
	rcode := dnsmessage.RCode(resp[3] & 0xf)
	if rcode != dnsmessage.RCodeSuccess && rcode != dnsmessage.RCodeNameError || resp[2]&0x02 != 0 {
		return // errors and truncated answers are asked again
	}
	ttls, err := recordTTLs(resp)
	if err != nil || len(ttls) == 0 {
		return
	}
	ttl := uint32(maxCacheTTL)
	for _, t := range ttls {
		ttl = min(ttl, t.ttl)
	}
	if ttl == 0 {
		return
	}
	maxEntries, maxBytes := f.MaxEntries, f.MaxBytes
	if maxEntries <= 0 {
		maxEntries = 4096
	}
	if maxBytes <= 0 {
		maxBytes = 8 << 20
	}
	if len(resp) > maxBytes/16 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	k := keyOf(q)
	if old, ok := f.cache[k]; ok {
		f.dropLocked(old)
	}
	for f.lru.Len() > 0 && (f.lru.Len() >= maxEntries || f.bytes+len(resp) > maxBytes) {
		f.dropLocked(f.lru.Front().Value.(*cacheEntry))
	}
	now := f.now()
	e := &cacheEntry{key: k, msg: resp, ttls: ttls, stored: now, expires: now.Add(time.Duration(ttl) * time.Second)}
	e.elem = f.lru.PushBack(e)
	f.cache[k] = e
	f.bytes += len(resp)
}

func (f *DNSForwarder) dropLocked(e *cacheEntry) {
	delete(f.cache, e.key)
	f.lru.Remove(e.elem)
	f.bytes -= len(e.msg)
}

// errNoUpstream is every server failing or none being configured.
var errNoUpstream = errors.New("no name server answered")

// exchange asks the servers q, over UDP and again over TCP when the answer
// was truncated, and returns the first answer that is not a server failure
// (or the last failure). The answer carries q's ID.
func (f *DNSForwarder) exchange(ctx context.Context, q *dnsQuery) ([]byte, error) {
	// A question already on its way is waited for, not asked again: a
	// burst of the same lookup (parallel test workers starting) costs the
	// servers one question.
	k := keyOf(q)
	f.mu.Lock()
	f.init()
	if c, ok := f.calls[k]; ok {
		f.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if c.err != nil {
			return nil, c.err
		}
		return forClient(c.resp, q), nil
	}
	c := &dnsCall{done: make(chan struct{})}
	f.calls[k] = c
	f.mu.Unlock()
	c.resp, c.err = f.exchangeOnce(ctx, q)
	f.mu.Lock()
	delete(f.calls, k)
	f.mu.Unlock()
	close(c.done)
	return c.resp, c.err
}

func (f *DNSForwarder) exchangeOnce(ctx context.Context, q *dnsQuery) ([]byte, error) {
	if len(f.Servers) == 0 {
		return nil, fmt.Errorf("%w: the substrate's resolv.conf names no server", errNoUpstream)
	}
	deadline, timeout := f.Deadline, f.Timeout
	if deadline <= 0 {
		deadline = 3 * time.Second
	}
	if timeout <= 0 {
		timeout = 1500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var last []byte
	var lastErr error
	for _, server := range f.Servers {
		resp, err := f.ask(ctx, "udp", server, q, timeout)
		if err == nil && resp[2]&0x02 != 0 {
			resp, err = f.ask(ctx, "tcp", server, q, timeout)
		}
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		switch dnsmessage.RCode(resp[3] & 0xf) {
		case dnsmessage.RCodeServerFailure, dnsmessage.RCodeRefused:
			last = resp
			continue
		}
		f.store(q, resp)
		return resp, nil
	}
	if last != nil {
		return last, nil
	}
	return nil, fmt.Errorf("%w: %v", errNoUpstream, lastErr)
}

// ask sends q to one server under an ID of its own, so that the client's
// choice of ID cannot be used to slip an answer in, and waits for the
// answer to that very question.
func (f *DNSForwarder) ask(ctx context.Context, network, server string, q *dnsQuery, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	id := uint16(rand.Uint32())
	out, err := forwardQuery(q)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(out, id)
	if network == "tcp" {
		out = append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)
	}
	if _, err := conn.Write(out); err != nil {
		return nil, err
	}
	for {
		var resp []byte
		if network == "tcp" {
			if resp, err = readTCPMsg(conn); err != nil {
				return nil, err
			}
		} else {
			buf := make([]byte, dnsMaxMsg)
			n, err := conn.Read(buf)
			if err != nil {
				return nil, err
			}
			resp = buf[:n]
		}
		if answers(resp, id, q) {
			binary.BigEndian.PutUint16(resp, q.id)
			// This resolver recurses for the sandbox, whatever the server
			// it asked says of itself (an authoritative one says nothing).
			resp[3] |= 0x80 // RA
			return resp, nil
		}
		if network == "tcp" {
			return nil, fmt.Errorf("%s answered another question", server)
		}
	}
}

// answers reports whether resp is a response with id to q's question.
func answers(resp []byte, id uint16, q *dnsQuery) bool {
	if len(resp) < q.qEnd || binary.BigEndian.Uint16(resp) != id || resp[2]&0x80 == 0 {
		return false
	}
	if binary.BigEndian.Uint16(resp[4:6]) != 1 {
		return false
	}
	return lowerASCII(resp[dnsHeaderLen:q.qEnd]) == lowerASCII(q.raw[dnsHeaderLen:q.qEnd])
}

// lowerASCII folds the case of ASCII letters only, as DNS compares names
// (RFC 4343); other bytes are a label's own.
func lowerASCII(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

// readTCPMsg reads one length-prefixed message (RFC 1035 4.2.2).
func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}
