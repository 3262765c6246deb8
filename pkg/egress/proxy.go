package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
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
	DefaultMaxConns      = 512
	DefaultHeaderTimeout = 30 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultDialTimeout   = 10 * time.Second
	DefaultDNSTimeout    = 5 * time.Second
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
	// Upstream, if set, is the substrate's own proxy: names it applies to
	// are reached through it with CONNECT, after the policy, not dialled.
	Upstream *Upstream
	Audit    *Audit // nil: no audit records
	Log      *slog.Logger
	Label    string // names this proxy in audit records and logs ("agent", "verifier")
	// MaxConns bounds concurrent client connections, tunnels included;
	// connections not yet granted anything are evicted oldest first to
	// make room.
	MaxConns int
	// HeaderTimeout bounds the wait for a connection's first request head;
	// IdleTimeout ends connections and tunnels that move no byte.
	HeaderTimeout, IdleTimeout, DialTimeout, DNSTimeout time.Duration

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
	return s.serveGated(ctx, ln, "egress proxy", func(c net.Conn) {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		writeRefusal(bufio.NewWriterSize(c, 512), 503, "too-many-connections", "too many connections through the proxy; retry later")
		c.Close()
	}, s.serveConn)
}

// serveGated accepts on ln until ctx ends, admits each connection at a gate
// of MaxConns (full answers one that finds it full), and hands it to serve
// on a goroutine of its own; then it closes ln and every connection, and
// returns nil once all are done.
func (s *Proxy) serveGated(ctx context.Context, ln net.Listener, what string, full func(net.Conn), serve func(context.Context, net.Conn, *ticket)) error {
	gate := &gate{max: s.MaxConns}
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
			return fmt.Errorf("accept on %s %s: %w", what, ln.Addr(), err)
		}
		t, ok := gate.enter(c)
		if !ok {
			s.Log.Warn("egress: connection limit reached", "proxy", s.Label, "listener", what, "client", c.RemoteAddr(), "limit", s.MaxConns)
			full(c)
			continue
		}
		wg.Go(func() {
			defer t.leave()
			serve(ctx, c, t)
		})
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
	if s.HeaderTimeout <= 0 {
		s.HeaderTimeout = DefaultHeaderTimeout
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

// serveConn answers the requests of one client connection. Until a request
// has been granted, the connection must deliver a complete head within
// HeaderTimeout and may be evicted by the gate.
func (s *Proxy) serveConn(ctx context.Context, raw net.Conn, t *ticket) {
	c := &clientConn{s: s, raw: raw, act: newActivity(), client: raw.RemoteAddr().String()}
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	defer raw.Close()
	defer c.dropUpstream()
	conn := &idleConn{Conn: raw, idle: s.IdleTimeout, act: c.act}
	c.br = bufio.NewReaderSize(conn, http1.BufSize)
	c.bw = bufio.NewWriterSize(conn, http1.BufSize)
	for first := true; ; first = false {
		var expire *time.Timer
		if first {
			expire = time.AfterFunc(s.HeaderTimeout, func() { raw.Close() })
		}
		req, err := http1.ReadRequest(c.br, NormalizeHost)
		if expire != nil && !expire.Stop() {
			return // too slow: the connection is closed already
		}
		if err != nil {
			var pe *http1.Error
			if errors.As(err, &pe) {
				s.Audit.record(event{kind: "decision", label: s.Label, client: c.client, verdict: "deny", reason: "bad-request: " + pe.Reason})
				writeRefusal(c.bw, pe.Status, "bad-request", pe.Reason)
			}
			return
		}
		g, ok := s.grant(proxyToken(req.Header))
		if !ok {
			s.Audit.record(event{kind: "decision", label: s.Label, client: c.client, method: req.Method, host: req.Host, port: req.Port, verdict: "deny", reason: "auth-required"})
			writeRefusal(c.bw, 407, "auth-required", "this proxy needs a valid token in Proxy-Authorization")
			return
		}
		t.granted()
		if req.Method == "CONNECT" {
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
