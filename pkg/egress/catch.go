package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/pkg/netrules"
)

// CatchPort is the transparent listener's port on the sandbox's loopback:
// the rules send every outbound TCP connection there (pkg/netrules).
const CatchPort = 3130

// Catcher serves the transparent listener. Each connection the rules sent
// there is judged by where it was going (SO_ORIGINAL_DST) under the policy
// of whoever made it, then dialled to exactly that address (no lookup
// happens here at all) and relayed. A refusal is a reset, never a reply
// that a client could take for the server's.
type Catcher struct {
	// Proxy is the template for serving: Policy is the agent's; Own, Dial,
	// Audit, Log, MaxConns and the timeouts apply as for the proxy.
	Proxy Proxy
	// Answers are the addresses answered for names, which allowlist
	// connections are judged against.
	Answers *Answers
	// Visit, if set, attributes a connection to an open visit and gives
	// that visit's grant; an unattributed connection is the agent's.
	Visit func(client, dst netip.AddrPort) (Judge, bool)
	// PeekTimeout bounds the wait for a connection's first bytes under
	// allowlist, where its TLS server name or HTTP Host is checked; 0 is
	// DefaultPeekTimeout. A protocol whose server speaks first waits that
	// long once per connection.
	PeekTimeout time.Duration
	// origDst reads a caught connection's destination; tests replace it.
	origDst func(net.Conn) (netip.AddrPort, error)
}

// Judge is whose policy a caught connection is judged by, and for how
// long it may live.
type Judge struct {
	Policy Policy
	Ctx    context.Context // its end ends the connection (a visit's end)
	Label  string          // in audit records and logs: "agent", "verifier", …
}

// Serve answers caught connections on ln until ctx ends, then closes ln and
// every connection it accepted, and returns nil once they are done.
func (k *Catcher) Serve(ctx context.Context, ln net.Listener) error {
	s := k.Proxy.withDefaults()
	origDst := k.origDst
	if origDst == nil {
		origDst = netrules.OriginalDst
	}
	return s.serveGated(ctx, ln, "the transparent listener", reset, func(ctx context.Context, c net.Conn, t *ticket) {
		k.serveConn(ctx, s, c, t, origDst)
	})
}

// serveConn judges one caught connection and relays it if it passes.
func (k *Catcher) serveConn(ctx context.Context, s *Proxy, c net.Conn, t *ticket, origDst func(net.Conn) (netip.AddrPort, error)) {
	start := time.Now()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	client := clientAddr(c.RemoteAddr())
	e := event{kind: "decision", label: "caught:" + s.Label, client: client.String(), method: "TCP"}
	dst, err := origDst(c)
	if err != nil {
		e.verdict, e.reason = "error", "no-original-destination: "+err.Error()
		s.Audit.record(e)
		reset(c)
		return
	}
	e.addr, e.port = dst, dst.Port()
	g := Judge{Policy: s.Policy, Ctx: ctx, Label: cmp.Or(s.Label, "agent")}
	if k.Visit != nil {
		if vg, ok := k.Visit(client, dst); ok {
			g = vg
		}
	}
	e.label = "caught:" + g.Label
	names, rerr := k.judge(s, g.Policy, dst)
	e.host = strings.Join(names, ",")
	refuse := func(rerr *refusal) {
		e.verdict, e.reason = "deny", rerr.tag+": "+rerr.err.Error()
		s.Audit.record(e)
		s.Log.Info("egress: caught connection refused", "policy", g.Label, "client", client, "dst", dst, "err", rerr)
		reset(c)
	}
	if rerr != nil {
		refuse(rerr)
		return
	}
	var early []byte
	var name string
	if g.Policy.Mode == Allowlist {
		var perr error
		early, name, perr = peekName(c, cmp.Or(k.PeekTimeout, DefaultPeekTimeout))
		rerr := k.judgeName(g.Policy, name, dst)
		if perr != nil {
			rerr = &refusal{tag: "name-address-mismatch", err: perr}
		}
		if rerr != nil {
			refuse(rerr)
			return
		}
	}
	release := k.Answers.Hold(dst.Addr())
	defer release()
	t.granted()
	dctx, cancel := context.WithTimeout(ctx, s.DialTimeout)
	up, err := k.dial(dctx, s, g.Policy, cmp.Or(name, firstAllowed(g.Policy, names)), dst)
	cancel()
	if err != nil {
		e.verdict, e.reason = "error", "connect-failed: "+err.Error()
		s.Audit.record(e)
		reset(c)
		return
	}
	defer up.Close()
	e.verdict = "allow"
	s.Audit.record(e)
	if len(early) > 0 {
		if _, err := up.Write(early); err != nil {
			reset(c)
			return
		}
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	vstop := context.AfterFunc(g.Ctx, rcancel) // a visit's end ends its connections
	defer vstop()
	ab, ba := relay(rctx, c, up, s.IdleTimeout)
	s.Audit.record(event{kind: "close", label: e.label, client: e.client, method: "TCP", host: e.host, port: dst.Port(),
		addr: dst, status: 200, up: int64(len(early)) + ab, down: ba, elapsed: time.Since(start)})
}

// dial reaches the caught connection's destination: through the upstream
// proxy as CONNECT name:port where one applies to the name it is known
// by, else the checked address itself.
func (k *Catcher) dial(ctx context.Context, s *Proxy, pol Policy, name string, dst netip.AddrPort) (net.Conn, error) {
	if name != "" {
		if via := s.Upstream.For(name, dst.Port()); via != nil {
			return s.Upstream.Connect(ctx, s.Dial, via, name, dst.Port())
		}
	}
	return s.Dial(ctx, "tcp", dst.String())
}

// firstAllowed is the first of names that pol allows, or "".
func firstAllowed(pol Policy, names []string) string {
	for _, n := range names {
		if pol.AllowsHost(n) {
			return n
		}
	}
	return ""
}

// judge decides by address: the names it knows the address by, and the
// refusal, if any.
func (k *Catcher) judge(s *Proxy, pol Policy, dst netip.AddrPort) ([]string, *refusal) {
	a := dst.Addr().Unmap()
	names := k.Answers.NamesOf(a)
	if a.IsLoopback() || a.IsUnspecified() {
		// Only a connection made straight to the listener arrives with its
		// own address: the rules leave loopback alone.
		return names, &refusal{tag: "blocked-by-address", err: fmt.Errorf("%s: a connection straight to the transparent listener: %w", dst, ErrBlockedAddress)}
	}
	switch pol.Mode {
	case NoNetwork:
		return names, &refusal{tag: "blocked-by-policy", err: errors.New("the policy is no-network")}
	case Allowlist:
		allowed := false
		for _, n := range names {
			allowed = allowed || pol.AllowsHost(n)
		}
		if !allowed {
			return names, &refusal{tag: "blocked-by-allowlist", err: fmt.Errorf("%s was never answered for an allowed name: %w", a, ErrBlockedHost)}
		}
	}
	if err := s.checkAddr(pol, a); err != nil {
		return names, &refusal{tag: "blocked-by-address", err: err}
	}
	return names, nil
}

// DefaultPeekTimeout is Catcher.PeekTimeout's default: a client that
// speaks first (TLS, HTTP, SSH, Redis, PostgreSQL) has sent its first
// bytes long before it.
const DefaultPeekTimeout = 250 * time.Millisecond

// peekName reads c's first bytes until they show whether they carry a
// name (a TLS server name, an HTTP Host), for at most timeout; it returns
// what it read, to be sent on, and the name, if any. A ClientHello or
// request head that cannot be read whole and with certainty in that time
// is an error: it might name anything.
func peekName(c net.Conn, timeout time.Duration) ([]byte, string, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, maxPeek)
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		name, more, perr := peekedName(buf[:n])
		if errors.Is(perr, errNotPeekable) {
			return buf[:n], "", nil // another protocol: no name to check
		}
		if !more || perr != nil {
			return buf[:n], name, perr
		}
		if err != nil {
			if n == 0 {
				return nil, "", nil // the server speaks first, or the client said nothing
			}
			return buf[:n], "", fmt.Errorf("the first %d bytes begin a ClientHello or request head that did not end within %s", n, timeout)
		}
	}
	return buf[:n], "", errMalformed
}

// judgeName checks the name a connection carries, if any: an allowed name
// whose answers include the destination. An allowed name never opens an
// address by itself.
func (k *Catcher) judgeName(pol Policy, name string, dst netip.AddrPort) *refusal {
	if name == "" {
		return nil
	}
	h, err := NormalizeHost(name)
	if err != nil {
		return &refusal{tag: "name-address-mismatch", err: fmt.Errorf("the connection names %q: %w", name, err)}
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Unmap() == dst.Addr().Unmap() {
			return nil
		}
		return &refusal{tag: "name-address-mismatch", err: fmt.Errorf("the connection names %s but goes to %s: %w", h, dst.Addr(), ErrBlockedHost)}
	}
	if !pol.AllowsHost(h) {
		return &refusal{tag: "name-address-mismatch", err: fmt.Errorf("the connection names %s, which is not allowed: %w", h, ErrBlockedHost)}
	}
	if !k.Answers.Answered(h, dst.Addr()) {
		return &refusal{tag: "name-address-mismatch", err: fmt.Errorf("the connection names %s, which was never answered with %s: %w", h, dst.Addr(), ErrBlockedHost)}
	}
	return nil
}

// reset closes c with a TCP reset (SO_LINGER 0): the client's next read or
// write fails with ECONNRESET, and nothing it could take for a server's
// answer is sent.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// refusedRanges are the IPv4 ranges every policy given refuses by address
// alone, whoever connects: the rules reset connections to them before the
// handshake. A range one phase may reach is left to the listener, which
// knows whose connection it is.
func refusedRanges(pols ...Policy) []netrules.Range {
	all := []span{{0, 1<<32 - 1}}
	out := all
	for _, p := range pols {
		refused := all
		if p.Mode != NoNetwork {
			refused = nil
			for _, s := range specials {
				if s.embeds == nil && s.prefix.Addr().Is4() {
					refused = append(refused, spanOf(s.prefix))
				}
			}
			for _, c := range p.AllowCIDRs {
				if c.Addr().Unmap().Is4() && (c.Addr().Is4() || c.Bits() >= 96) {
					bits := c.Bits()
					if c.Addr().Is6() {
						bits -= 96
					}
					refused = subtract(refused, spanOf(netip.PrefixFrom(c.Addr().Unmap(), bits).Masked()))
				}
			}
		}
		out = intersect(out, refused)
	}
	var rs []netrules.Range
	for _, s := range out {
		rs = append(rs, netrules.Range{From: addr4(s.lo), To: addr4(s.hi)})
	}
	return rs
}

// span is an inclusive range of IPv4 addresses as numbers.
type span struct{ lo, hi uint64 }

func spanOf(p netip.Prefix) span {
	b := p.Masked().Addr().As4()
	lo := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	return span{lo, lo + 1<<(32-p.Bits()) - 1}
}

func addr4(n uint64) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// subtract removes cut from every span of ss.
func subtract(ss []span, cut span) []span {
	var out []span
	for _, s := range ss {
		if cut.hi < s.lo || cut.lo > s.hi {
			out = append(out, s)
			continue
		}
		if s.lo < cut.lo {
			out = append(out, span{s.lo, cut.lo - 1})
		}
		if s.hi > cut.hi {
			out = append(out, span{cut.hi + 1, s.hi})
		}
	}
	return out
}

// intersect is what both lists of spans cover.
func intersect(a, b []span) []span {
	var out []span
	for _, x := range a {
		for _, y := range b {
			if lo, hi := max(x.lo, y.lo), min(x.hi, y.hi); lo <= hi {
				out = append(out, span{lo, hi})
			}
		}
	}
	return out
}

// clientAddr is a TCP address as a netip.AddrPort.
func clientAddr(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	return netip.AddrPort{}
}

// rejectLogGroup is the nflog group of the rules' rejected packets.
const rejectLogGroup = 1

// auditLimit bounds the audit records of rejected packets to 100 a
// second: a flood of datagrams must not turn into a flood of writes.
type auditLimit struct {
	mu     sync.Mutex
	second int64
	n      int
}

func (l *auditLimit) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := now.Unix(); s != l.second {
		l.second, l.n = s, 0
	}
	l.n++
	return l.n <= 100
}

// protoName names an IP protocol for the audit.
func protoName(p uint8) string {
	switch p {
	case syscall.IPPROTO_UDP:
		return "UDP"
	case syscall.IPPROTO_ICMP:
		return "ICMP"
	case syscall.IPPROTO_SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("IP protocol %d", p)
}
