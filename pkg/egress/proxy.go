package egress

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Resolver looks up a name's addresses; *net.Resolver satisfies it, and
// tests substitute answers that change between calls.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc opens a connection; (*net.Dialer).DialContext satisfies it.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Defaults for the zero fields of Proxy.
const (
	DefaultMaxConns    = 512
	DefaultIdleTimeout = 2 * time.Minute
	DefaultDialTimeout = 10 * time.Second
	DefaultDNSTimeout  = 5 * time.Second
)

// Proxy is an HTTP/1.1 forward proxy with CONNECT that lets a sandbox reach
// what its Policy allows and nothing else. Its fields are configuration; set
// them before Serve and leave them alone while it runs.
type Proxy struct {
	Policy Policy
	// Token, if set, must be presented in Proxy-Authorization (Bearer, or
	// Basic with the token as password or user name).
	Token string
	// Own are the daemon's own addresses, refused even inside AllowCIDRs:
	// its services are reached as peers, never through the proxy.
	Own      []netip.Addr
	Resolver Resolver // nil: net.DefaultResolver
	Dial     DialFunc // nil: a net.Dialer
	Audit    *Audit   // nil: no audit records
	Log      *slog.Logger
	Label    string // names this proxy in audit records and logs ("agent", "verifier")
	// MaxConns bounds concurrent client connections, tunnels included.
	MaxConns                             int
	IdleTimeout, DialTimeout, DNSTimeout time.Duration

	// grant, if set, replaces Policy and Token: the Visitor's per-visit
	// policies.
	grant func(token string) (grant, bool)
}

// grant is what one client may do: a policy, for as long as ctx lives, under
// a key that keeps upstream connections of different grants apart.
type grant struct {
	policy Policy
	ctx    context.Context
	key    string
}

// Serve answers proxy clients on ln until ctx ends, then closes ln and every
// connection it accepted and returns nil after all of them are done. Under
// NoNetwork it refuses to start: nothing may listen on the proxy port then.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	if p.grant == nil && p.Policy.Mode == NoNetwork {
		ln.Close()
		return fmt.Errorf("serve egress proxy on %s: policy is %s, so nothing may listen there", ln.Addr(), NoNetwork)
	}
	s := p.withDefaults()
	sem := make(chan struct{}, s.MaxConns)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := accept(ctx, ln, s.Log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on egress proxy %s: %w", ln.Addr(), err)
		}
		select {
		case sem <- struct{}{}:
		default:
			s.Log.Warn("egress: connection limit reached", "proxy", s.Label, "client", c.RemoteAddr(), "limit", s.MaxConns)
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			writeRefusal(bufio.NewWriterSize(c, 512), 503, "too-many-connections", "too many connections through the proxy; retry later")
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.serveConn(ctx, c)
		}()
	}
}

// accept waits for the next connection, riding out transient failures
// (EMFILE, ECONNABORTED) with a capped backoff instead of giving up the port:
// the sandbox would have no way out until the daemon restarts.
func accept(ctx context.Context, ln net.Listener, log *slog.Logger) (net.Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err == nil || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
			return c, err
		}
		log.Warn("egress: accept failed, retrying", "addr", ln.Addr(), "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// withDefaults returns a copy of p with every zero field filled in.
func (p *Proxy) withDefaults() *Proxy {
	s := *p
	if s.Resolver == nil {
		s.Resolver = net.DefaultResolver
	}
	if s.Dial == nil {
		s.Dial = (&net.Dialer{}).DialContext
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.MaxConns <= 0 {
		s.MaxConns = DefaultMaxConns
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.DialTimeout <= 0 {
		s.DialTimeout = DefaultDialTimeout
	}
	if s.DNSTimeout <= 0 {
		s.DNSTimeout = DefaultDNSTimeout
	}
	if s.grant == nil {
		s.grant = s.fixedGrant
	}
	return &s
}

// fixedGrant is the plain proxy's grant: its one policy, if the token fits.
func (p *Proxy) fixedGrant(token string) (grant, bool) {
	if p.Token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(p.Token)) != 1 {
		return grant{}, false
	}
	return grant{policy: p.Policy, ctx: context.Background()}, true
}

// proxyToken extracts the credential of a Proxy-Authorization field.
func proxyToken(h header) string {
	scheme, cred, _ := strings.Cut(strings.Trim(h.get("Proxy-Authorization"), " \t"), " ")
	cred = strings.Trim(cred, " \t")
	switch strings.ToLower(scheme) {
	case "bearer":
		return cred
	case "basic":
		b, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return ""
		}
		user, pass, _ := strings.Cut(string(b), ":")
		if pass == "" {
			return user
		}
		return pass
	}
	return ""
}

// tokenKey is how visits are looked up: by hash, so that comparing keys
// leaks nothing useful about a token.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return string(sum[:])
}

// clientConn is one client connection and the upstream connection it keeps
// alive between requests.
type clientConn struct {
	s      *Proxy
	raw    net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	act    *activity
	client string
	up     *upstream
}

// upstream is a connection to an origin server, reused while requests on
// the same client connection go to the same host and port under one grant.
type upstream struct {
	key  string
	raw  net.Conn
	addr netip.AddrPort
	br   *bufio.Reader
	bw   *bufio.Writer
}

func (u *upstream) Close() error { return u.raw.Close() }

func (s *Proxy) serveConn(ctx context.Context, raw net.Conn) {
	c := &clientConn{s: s, raw: raw, act: newActivity(), client: raw.RemoteAddr().String()}
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	defer raw.Close()
	defer c.dropUpstream()
	conn := &idleConn{Conn: raw, idle: s.IdleTimeout, act: c.act}
	c.br = bufio.NewReaderSize(conn, readBufSize)
	c.bw = bufio.NewWriterSize(conn, readBufSize)
	for {
		req, err := readRequest(c.br)
		if err != nil {
			var pe *protoError
			if errors.As(err, &pe) {
				s.Audit.record(event{kind: "decision", label: s.Label, client: c.client, verdict: "deny", reason: "bad-request: " + pe.reason})
				writeRefusal(c.bw, pe.status, "bad-request", pe.reason)
			}
			return
		}
		g, ok := s.grant(proxyToken(req.header))
		if !ok {
			s.Audit.record(event{kind: "decision", label: s.Label, client: c.client, method: req.method, host: req.host, port: req.port, verdict: "deny", reason: "auth-required"})
			writeRefusal(c.bw, 407, "auth-required", "this proxy needs a valid token in Proxy-Authorization")
			return
		}
		if req.method == "CONNECT" {
			c.tunnel(ctx, g, req)
			return
		}
		if !c.forward(ctx, g, req) {
			return
		}
	}
}

func (c *clientConn) dropUpstream() {
	if c.up != nil {
		c.up.Close()
		c.up = nil
	}
}

// refusal is a request the policy refuses (403) or could not carry out (502).
type refusal struct {
	status int
	tag    string // X-Proxy-Error
	msg    string // for the client's eyes
	err    error
}

func (r *refusal) Error() string { return r.msg + ": " + r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// connect resolves host once, checks every address, and dials only those
// that passed, in order, each under the dial timeout. The address it returns
// is the one it checked: no second resolution happens anywhere.
func (s *Proxy) connect(ctx context.Context, pol Policy, host string, port uint16) (net.Conn, netip.AddrPort, error) {
	if !pol.AllowsHost(host) {
		return nil, netip.AddrPort{}, &refusal{status: 403, tag: "blocked-by-allowlist",
			msg: fmt.Sprintf("%s is not on this sandbox's allowlist", host), err: fmt.Errorf("connect %s: %w", host, ErrBlockedHost)}
	}
	addrs, err := s.resolve(ctx, host)
	if err != nil {
		return nil, netip.AddrPort{}, &refusal{status: 502, tag: "dns-failed", msg: fmt.Sprintf("cannot resolve %s", host), err: err}
	}
	var passed []netip.Addr
	var blocked error
	for _, a := range addrs {
		if err := s.checkAddr(pol, a); err != nil {
			blocked = cmp.Or(blocked, err)
			continue
		}
		passed = append(passed, a)
	}
	if len(passed) == 0 {
		msg := fmt.Sprintf("%s resolves only to addresses that are not reachable from the sandbox", host)
		if len(addrs) == 1 && addrs[0].String() == host {
			msg = fmt.Sprintf("%s is not reachable from the sandbox", host)
		}
		return nil, netip.AddrPort{}, &refusal{status: 403, tag: "blocked-by-address", msg: msg, err: fmt.Errorf("connect %s: %w", host, blocked)}
	}
	var last error
	for _, a := range passed {
		ap := netip.AddrPortFrom(a, port)
		dctx, cancel := context.WithTimeout(ctx, s.DialTimeout)
		conn, err := s.Dial(dctx, "tcp", ap.String())
		cancel()
		if err == nil {
			return conn, ap, nil
		}
		last = err
	}
	return nil, netip.AddrPort{}, &refusal{status: 502, tag: "connect-failed",
		msg: fmt.Sprintf("cannot connect to %s port %d", host, port), err: fmt.Errorf("dial %s: %w", host, last)}
}

// resolve returns host's addresses; an IP literal is its own answer.
func (s *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.DNSTimeout)
	defer cancel()
	addrs, err := s.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return addrs, nil
}

// checkAddr is the policy's guard plus the daemon's own addresses.
func (s *Proxy) checkAddr(pol Policy, a netip.Addr) error {
	for _, e := range embedded(a.Unmap()) {
		for _, own := range s.Own {
			if e == own.Unmap() {
				return fmt.Errorf("check %s: the daemon's own address: %w", a, ErrBlockedAddress)
			}
		}
	}
	return pol.CheckAddr(a)
}

// decide connects for req and records the decision; on refusal it answers
// the client and returns nil.
func (c *clientConn) decide(ctx context.Context, g grant, req *request) (net.Conn, netip.AddrPort) {
	s := c.s
	conn, ap, err := s.connect(ctx, g.policy, req.host, req.port)
	e := event{kind: "decision", label: s.Label, client: c.client, method: req.method, host: req.host, port: req.port, addr: ap}
	if err != nil {
		var r *refusal
		errors.As(err, &r)
		e.verdict, e.reason = "deny", r.tag+": "+err.Error()
		if r.status != 403 {
			e.verdict = "error"
		}
		s.Audit.record(e)
		s.Log.Info("egress: refused", "proxy", s.Label, "client", c.client, "method", req.method, "host", req.host, "port", req.port, "err", err)
		writeRefusal(c.bw, r.status, r.tag, r.msg)
		return nil, ap
	}
	e.verdict = "allow"
	s.Audit.record(e)
	return conn, ap
}

// tunnel carries out CONNECT: a 200, then bytes both ways until both ends
// are done.
func (c *clientConn) tunnel(ctx context.Context, g grant, req *request) {
	start := time.Now()
	up, ap := c.decide(ctx, g, req)
	if up == nil {
		return
	}
	defer up.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel) // a visit's end ends its tunnels
	defer stop()
	c.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := c.bw.Flush(); err != nil {
		return
	}
	var early int64
	if n := c.br.Buffered(); n > 0 { // the client did not wait for the 200
		b, _ := c.br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
		early = int64(n)
	}
	c.raw.SetDeadline(time.Time{})
	ab, ba := relay(ctx, c.raw, up, c.s.IdleTimeout)
	c.s.Audit.record(event{kind: "close", label: c.s.Label, client: c.client, method: req.method, host: req.host, port: req.port,
		addr: ap, status: 200, up: early + ab, down: ba, elapsed: time.Since(start)})
}

// forward carries out one plain-HTTP exchange and reports whether the
// client connection may carry another.
func (c *clientConn) forward(ctx context.Context, g grant, req *request) bool {
	start := time.Now()
	key := g.key + "\x00" + req.authority
	if c.up != nil && c.up.key != key {
		c.dropUpstream()
	}
	reused := c.up != nil
	if reused {
		c.s.Audit.record(event{kind: "decision", label: c.s.Label, client: c.client, method: req.method, host: req.host, port: req.port,
			addr: c.up.addr, verdict: "allow", reason: "kept-alive connection"})
	} else {
		conn, ap := c.decide(ctx, g, req)
		if conn == nil {
			return false
		}
		c.setUpstream(key, conn, ap)
	}
	x := exchange{c: c, req: req, start: start}
	keep, retry := x.run(g.ctx, reused)
	if retry { // a kept-alive upstream had closed before our request reached it
		c.dropUpstream()
		conn, ap := c.decide(ctx, g, req)
		if conn == nil {
			return false
		}
		c.setUpstream(key, conn, ap)
		x = exchange{c: c, req: req, start: start}
		keep, _ = x.run(g.ctx, false)
	}
	if !keep {
		c.dropUpstream()
	}
	c.s.Audit.record(event{kind: "close", label: c.s.Label, client: c.client, method: req.method, host: req.host, port: req.port,
		addr: x.addr, status: x.status, up: x.up, down: x.down, elapsed: time.Since(start), reason: x.reason})
	return x.clientKeep
}

func (c *clientConn) setUpstream(key string, conn net.Conn, ap netip.AddrPort) {
	ic := &idleConn{Conn: conn, idle: c.s.IdleTimeout, act: c.act}
	c.up = &upstream{key: key, raw: conn, addr: ap,
		br: bufio.NewReaderSize(ic, readBufSize), bw: bufio.NewWriterSize(ic, readBufSize)}
}

// exchange is one request and its response on a client connection.
type exchange struct {
	c          *clientConn
	req        *request
	start      time.Time
	addr       netip.AddrPort
	status     int
	up, down   int64
	reason     string
	clientKeep bool // the client connection can carry another request
}

// run sends the request and relays the response. keep says whether the
// upstream connection is reusable; retry that nothing happened yet and the
// request may go again on a fresh connection.
func (x *exchange) run(grantCtx context.Context, reused bool) (keep, retry bool) {
	c, req, up := x.c, x.req, x.c.up
	x.addr = up.addr
	stop := context.AfterFunc(grantCtx, func() { c.raw.Close(); up.raw.Close() }) // a visit's end ends its exchanges
	defer stop()
	out := req.body
	writeRequestHead(up.bw, req, out)
	if err := up.bw.Flush(); err != nil {
		if reused && req.body.kind == noBody {
			return false, true
		}
		x.fail(502, "upstream-failed", "the upstream server closed the connection", err)
		return false, false
	}

	// The body goes up in its own goroutine while the response is awaited,
	// so that an upstream that answers early (or sends 100 Continue) works.
	bodyDone := make(chan error, 1)
	bodyFinished := req.body.kind == noBody
	if !bodyFinished {
		go func() {
			n, rerr, werr := copyBody(up.bw, bodyReader(c.br, req.body), out)
			x.up = n
			if rerr != nil {
				bodyDone <- rerr
				up.raw.Close() // unblock the wait for a response
				return
			}
			bodyDone <- werr
		}()
	}
	defer func() {
		if !bodyFinished { // still reading the client: it cannot carry more
			x.clientKeep = false
			c.raw.Close()
			up.raw.Close()
			<-bodyDone
		}
	}()

	var resp *response
	var err error
	for {
		resp, err = readResponse(up.br, req.method)
		if err != nil {
			break
		}
		if resp.status >= 200 || resp.status == 101 {
			break
		}
		if !req.http10 { // interim responses (100 Continue, 103) go through
			writeHead(c.bw, resp, resp.header.endToEnd(), framing{kind: noBody})
			if c.bw.Flush() != nil {
				return false, false
			}
		}
	}
	if err != nil {
		if !bodyFinished {
			select {
			case berr := <-bodyDone:
				bodyFinished = true
				var pe *protoError
				if errors.As(berr, &pe) {
					x.fail(400, "bad-request", pe.reason, berr)
					return false, false
				}
			default:
			}
		}
		var pe *protoError
		if errors.As(err, &pe) {
			x.fail(502, "bad-upstream-response", pe.reason, err)
			return false, false
		}
		if reused && req.body.kind == noBody && errors.Is(err, io.EOF) {
			return false, true
		}
		x.fail(502, "upstream-failed", "the upstream server closed the connection before responding", err)
		return false, false
	}
	x.status = resp.status

	if resp.status == 101 {
		x.upgrade(resp)
		return false, false
	}

	// How the body reaches the client: its length if known, else chunked,
	// else (HTTP/1.0 client) until close.
	toClient := resp.body
	if toClient.kind == chunked || toClient.kind == byClose {
		toClient.kind = chunked
		if req.http10 {
			toClient.kind = byClose
		}
	}
	x.clientKeep = !req.close && toClient.kind != byClose
	fields := resp.header.endToEnd()
	if resp.body.kind != noBody {
		fields = resp.header.endToEnd("Content-Length")
	}
	writeHead(c.bw, resp, fields, toClient)
	if !x.clientKeep {
		c.bw.WriteString("Connection: close\r\n")
	} else if req.http10 {
		c.bw.WriteString("Connection: keep-alive\r\n")
	}
	c.bw.WriteString("\r\n")
	n, rerr, werr := copyBody(c.bw, bodyReader(up.br, resp.body), toClient)
	x.down = n
	if werr == nil {
		werr = c.bw.Flush()
	}
	if rerr != nil || werr != nil {
		x.reason = fmt.Sprintf("relay response body: %v", cmp.Or(rerr, werr))
		x.clientKeep = false
		return false, false
	}
	if !bodyFinished {
		t := time.NewTimer(50 * time.Millisecond)
		defer t.Stop()
		select {
		case berr := <-bodyDone:
			bodyFinished = true
			if berr != nil {
				x.clientKeep = false
				return false, false
			}
		case <-t.C:
			// The upstream answered without reading the whole body: neither
			// connection is in a known state (the deferred cleanup closes them).
			return false, false
		}
	}
	return !resp.close, false
}

// fail answers the client with an error status, if nothing of the response
// has been written yet.
func (x *exchange) fail(status int, tag, msg string, err error) {
	x.status, x.reason, x.clientKeep = status, tag+": "+err.Error(), false
	x.c.s.Log.Info("egress: exchange failed", "proxy", x.c.s.Label, "client", x.c.client, "host", x.req.host, "status", status, "err", err)
	writeRefusal(x.c.bw, status, tag, msg)
}

// upgrade relays a 101 for a WebSocket handshake and then splices both
// connections; any other 101 is refused.
func (x *exchange) upgrade(resp *response) {
	c, up := x.c, x.c.up
	if !x.req.websocket || !strings.EqualFold(strings.Trim(resp.header.get("Upgrade"), " \t"), "websocket") {
		x.fail(502, "bad-upstream-response", "upstream switched protocols without being asked for websocket", errors.New("unexpected 101"))
		return
	}
	writeHead(c.bw, resp, resp.header.endToEnd(), framing{kind: noBody})
	c.bw.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if c.bw.Flush() != nil {
		return
	}
	if n := up.br.Buffered(); n > 0 {
		b, _ := up.br.Peek(n)
		if _, err := c.raw.Write(b); err != nil {
			return
		}
	}
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		if _, err := up.raw.Write(b); err != nil {
			return
		}
	}
	c.raw.SetDeadline(time.Time{})
	up.raw.SetDeadline(time.Time{})
	x.up, x.down = relay(context.Background(), c.raw, up.raw, c.s.IdleTimeout)
}

// writeHead writes a status line and fields, without the final CRLF unless
// the message is interim (1xx).
func writeHead(w *bufio.Writer, resp *response, fields header, f framing) {
	w.WriteString("HTTP/1.1 " + strconv.Itoa(resp.status) + " " + resp.reason + "\r\n")
	writeFields(w, fields)
	writeFraming(w, f)
	if resp.status < 200 && resp.status != 101 {
		w.WriteString("\r\n")
	}
}

// copyBody moves a de-framed body from src into dst under framing out and
// flushes; it tells read errors (the sender's fault) from write errors.
func copyBody(dst *bufio.Writer, src io.Reader, out framing) (n int64, rerr, werr error) {
	var w io.Writer = dst
	if out.kind == chunked {
		w = chunkedWriter{dst}
	}
	buf := make([]byte, 32<<10)
	for {
		m, err := src.Read(buf)
		if m > 0 {
			if _, werr = w.Write(buf[:m]); werr != nil {
				return n, nil, werr
			}
			n += int64(m)
			if m < len(buf) { // the sender paused: pass on what came
				if werr = dst.Flush(); werr != nil {
					return n, nil, werr
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err, nil
		}
	}
	if out.kind == chunked {
		if werr = (chunkedWriter{dst}).Close(); werr != nil {
			return n, nil, werr
		}
	}
	return n, nil, dst.Flush()
}

// writeRefusal answers with a short plain-text error and Connection: close.
func writeRefusal(w *bufio.Writer, status int, tag, msg string) {
	body := msg + "\n"
	w.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + statusText(status) + "\r\n")
	w.WriteString("Content-Type: text/plain; charset=utf-8\r\nX-Proxy-Error: " + tag + "\r\n")
	if status == 407 {
		w.WriteString("Proxy-Authenticate: Basic realm=\"proxy\", Bearer\r\n")
	}
	w.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body)
	w.Flush()
}

func statusText(status int) string {
	switch status {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 407:
		return "Proxy Authentication Required"
	case 431:
		return "Request Header Fields Too Large"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "Error"
}
