package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ResolverAddr is where the sandbox's resolver listens inside the sandbox's
// network namespace, on UDP and TCP; the sandbox's resolv.conf names it, and
// every query to port 53 at any other address is sent to it. A loopback
// address of its own (as systemd-resolved's stub uses), so that a peer on
// port 53 keeps 127.0.0.1:53.
var ResolverAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 53}), 53)

// DNSConfig is what a DNSServer answers from.
type DNSConfig struct {
	// Hosts are the sandbox's hosts file's names (lower case, no trailing
	// dot) with their addresses, as imagefile.Hosts reads them; Peers are
	// the task's peers. Both answer before any policy or server is asked.
	Hosts map[string][]netip.Addr
	Peers []Peer
	// Upstream answers every other question that the policy lets through;
	// nil answers them SERVFAIL.
	Upstream *DNSForwarder
	// Agent is the policy of a query that PolicyFor does not attribute.
	Agent Policy
	// PolicyFor picks the policy of the client at addr on network ("udp"
	// or "tcp"), with the label its refusals are audited under; ok false
	// (or a nil PolicyFor) takes Agent, labelled "agent".
	PolicyFor func(network string, addr netip.AddrPort) (label string, p Policy, ok bool)
	// Answers records the addresses answered for allowed names under
	// allowlist (and the hosts file's, at start), which caught connections
	// are judged against. nil records nothing.
	Answers *Answers
	Audit   *Audit
	Log     *slog.Logger
}

// DNSServer is the sandbox's resolver: the hosts file and peers first, then,
// under the query's policy, the daemon's name servers. public answers every
// name and type truthfully (whether a connection is allowed is decided when
// it is made), allowlist answers allowed names only and NXDOMAIN for the
// rest, no-network REFUSED for everything. Every refusal is audited.
type DNSServer struct {
	c       DNSConfig
	hosts   map[string][]netip.Addr // names and reverse (PTR) names → addresses
	reverse map[string][]string     // reverse names → host names
	log     *slog.Logger
	// inflight bounds the queries waiting on an upstream; a query beyond
	// it is answered SERVFAIL at once instead of queueing.
	inflight chan struct{}
	chains   chains
}

// Bounds of the server's work, whatever its clients send.
const (
	dnsMaxInflight = 256
	dnsMaxTCPConns = 64
)

// dnsTCPIdle is how long a TCP client may keep a connection without
// sending a whole query (RFC 7766 suggests seconds); a variable for tests.
var dnsTCPIdle = 10 * time.Second

// NewDNSServer makes a server from c. The hosts file's addresses of names
// that the agent's policy allows go into c.Answers for good, since
// programs that read /etc/hosts never ask the resolver.
func NewDNSServer(c DNSConfig) *DNSServer {
	s := &DNSServer{
		c:        c,
		hosts:    map[string][]netip.Addr{},
		reverse:  map[string][]string{},
		log:      c.Log,
		inflight: make(chan struct{}, dnsMaxInflight),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	add := func(name string, a netip.Addr) {
		a = a.Unmap()
		s.hosts[name] = append(s.hosts[name], a)
		rev := reverseName(a)
		s.reverse[rev] = append(s.reverse[rev], name)
	}
	for name, addrs := range c.Hosts {
		for _, a := range addrs {
			add(name, a)
		}
	}
	for _, p := range c.Peers {
		if n, err := NormalizeHost(p.Name); err == nil {
			add(n, p.Addr)
		}
	}
	for name, addrs := range s.hosts {
		c.Answers.Pin(name, addrs)
	}
	return s
}

// Serve answers on pc (UDP) and ln (TCP), either of which may be nil, until
// ctx ends; it closes both.
func (s *DNSServer) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	if pc != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.serveUDP(ctx, pc)
			cancel()
		}()
	}
	if ln != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.serveTCP(ctx, ln)
			cancel()
		}()
	}
	<-ctx.Done()
	if pc != nil {
		pc.Close()
	}
	if ln != nil {
		ln.Close()
	}
	wg.Wait()
	close(errs)
	var first error
	for err := range errs {
		if err != nil && first == nil && !errors.Is(err, net.ErrClosed) {
			first = err
		}
	}
	return first
}

func (s *DNSServer) serveUDP(ctx context.Context, pc net.PacketConn) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	buf := make([]byte, dnsMaxMsg)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		client := udpClient(from)
		q, resp, wait := s.answerNow(buf[:n], "udp", client)
		if resp != nil {
			pc.WriteTo(fitUDP(resp, q), from)
			continue
		}
		if q == nil {
			continue
		}
		q.raw = append([]byte(nil), q.raw...) // buf is read into again
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.inflight }()
			pc.WriteTo(fitUDP(wait(ctx), q), from)
		}()
	}
}

// fitUDP truncates resp to what q's client takes over UDP.
func fitUDP(resp []byte, q *dnsQuery) []byte {
	if q != nil && len(resp) > q.udpSize {
		return truncated(resp, q)
	}
	return resp
}

// serveTCP admits at most dnsMaxTCPConns connections; a new one closes the
// oldest (none is ever granted more), so idle connections cannot lock the
// verifier out.
func (s *DNSServer) serveTCP(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	g := &gate{max: dnsMaxTCPConns}
	for {
		c, err := accept(ctx, ln, s.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		t, _ := g.enter(c)
		wg.Go(func() {
			defer t.leave()
			s.serveConn(ctx, c)
		})
	}
}

// serveConn answers the queries of one TCP connection in turn, each within
// dnsTCPIdle of the last, and ends with ctx.
func (s *DNSServer) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	client := tcpClient(c.RemoteAddr())
	for {
		c.SetDeadline(time.Now().Add(dnsTCPIdle))
		raw, err := readTCPMsg(c)
		if err != nil {
			return
		}
		q, resp, wait := s.answerNow(raw, "tcp", client)
		if resp == nil && q == nil {
			return // not a query: nothing to say on this stream
		}
		if resp == nil {
			resp = wait(ctx)
			<-s.inflight
		}
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// udpClient and tcpClient are a query's source, which PolicyFor
// attributes; the zero AddrPort if the socket is not IP.
func udpClient(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort()
	}
	return netip.AddrPort{}
}

func tcpClient(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}

// answerNow answers raw at once when it can (errors, refusals, the hosts
// file, the cache). Otherwise it takes an in-flight slot, which the caller
// gives back after calling wait for the upstream's answer. A nil query with
// no answer is input to drop.
func (s *DNSServer) answerNow(raw []byte, network string, client netip.AddrPort) (q *dnsQuery, resp []byte, wait func(context.Context) []byte) {
	q, rcode, err := parseQuery(raw)
	if errors.Is(err, errNotQuery) {
		return nil, nil, nil
	}
	if err != nil {
		return q, headerOnly(q, rcode), nil
	}
	label, pol := s.policyOf(network, client)
	refuse := func(rcode dnsmessage.RCode, reason string) (*dnsQuery, []byte, func(context.Context) []byte) {
		s.c.Audit.record(event{kind: "decision", label: label, client: client.String(), method: "dns " + strings.TrimPrefix(q.q.Type.String(), "Type"),
			host: q.name, port: ResolverAddr.Port(), verdict: "deny", reason: reason})
		return q, reply(q, rcode, nil, nil), nil
	}
	if pol.Mode != Public && pol.Mode != Allowlist {
		return refuse(dnsmessage.RCodeRefused, "no-network")
	}
	if q.q.Class == dnsmessage.ClassINET {
		if addrs, ok := s.hosts[q.name]; ok {
			return q, reply(q, dnsmessage.RCodeSuccess, ofType(addrs, q.q.Type), nil), nil
		}
		if names, ok := s.reverse[q.name]; ok {
			if q.q.Type == dnsmessage.TypePTR {
				return q, reply(q, dnsmessage.RCodeSuccess, nil, names), nil
			}
			return q, reply(q, dnsmessage.RCodeSuccess, nil, nil), nil
		}
	}
	host, err := NormalizeHost(q.name)
	if pol.Mode == Allowlist && (err != nil || !pol.AllowsHost(host) && !s.chains.leadsTo(label, host)) {
		return refuse(dnsmessage.RCodeNameError, "blocked-by-allowlist")
	}
	if s.c.Upstream == nil {
		return q, reply(q, dnsmessage.RCodeServerFailure, nil, nil), nil
	}
	if resp := s.c.Upstream.cached(q); resp != nil {
		if pol.Mode == Allowlist {
			// The first answer may have gone to a client under public.
			s.record(label, host, resp)
		}
		return q, resp, nil
	}
	select {
	case s.inflight <- struct{}{}:
	default:
		s.log.Warn("dns: too many queries wait on the name servers; answering SERVFAIL", "client", client.String())
		return q, reply(q, dnsmessage.RCodeServerFailure, nil, nil), nil
	}
	return q, nil, func(ctx context.Context) []byte {
		resp, err := s.c.Upstream.exchange(ctx, q)
		if err != nil {
			s.log.Warn("dns: upstream failed", "name", q.name, "type", q.q.Type.String(), "err", err)
			return reply(q, dnsmessage.RCodeServerFailure, nil, nil)
		}
		if pol.Mode == Allowlist {
			s.record(label, host, resp)
		}
		return resp
	}
}

// record notes the addresses resp answers for host, the allowed name asked
// (also when they stand at the end of a CNAME chain): a connection to them
// that carries host as its name is the one the allowlist lets through. The
// chain's names become names label's clients may ask for too, since some
// (nslookup) follow a chain themselves.
func (s *DNSServer) record(label, host string, resp []byte) {
	addrs, ttl, cnames := answerRecords(resp)
	if len(addrs) > 0 {
		s.c.Answers.Record(host, addrs, time.Duration(ttl)*time.Second)
	}
	s.chains.add(label, cnames)
}

// chains are the names CNAME records of answers to allowed names led to, per
// policy label, each for MinAnswerLife: a client that follows a chain
// itself asks for them next. Bounded; safe for concurrent use.
type chains struct {
	mu    sync.Mutex
	names map[[2]string]time.Time // {label, name} → until
}

// maxChains bounds the chained names kept.
const maxChains = 4096

func (c *chains) add(label string, names []string) {
	if len(names) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.names == nil {
		c.names = map[[2]string]time.Time{}
	}
	for _, n := range names {
		if len(c.names) >= maxChains {
			for k, until := range c.names { // the expired, or else any one
				if !now.Before(until) || len(c.names) >= maxChains {
					delete(c.names, k)
				}
				if len(c.names) < maxChains/2 {
					break
				}
			}
		}
		c.names[[2]string{label, n}] = now.Add(MinAnswerLife)
	}
}

func (c *chains) leadsTo(label, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.names[[2]string{label, name}]
	return ok && time.Now().Before(until)
}

// policyOf is the policy a query from client is answered under.
func (s *DNSServer) policyOf(network string, client netip.AddrPort) (string, Policy) {
	if s.c.PolicyFor != nil {
		if label, p, ok := s.c.PolicyFor(network, client); ok {
			return label, p
		}
	}
	return "agent", s.c.Agent
}

// ofType keeps the addresses a question of type t asks for: a name of the
// hosts file has no other records (an empty answer, not NXDOMAIN).
func ofType(addrs []netip.Addr, t dnsmessage.Type) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if t == dnsmessage.TypeA && a.Is4() || t == dnsmessage.TypeAAAA && a.Is6() {
			out = append(out, a)
		}
	}
	return out
}
