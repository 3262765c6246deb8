package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
)

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
	if via := s.Upstream.For(host, port); via != nil {
		return s.connectVia(ctx, pol, via, host, port)
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

// connectVia reaches host:port through the upstream proxy via, after the
// policy allowed host. An address literal is still guarded, since its
// address is known; a name is resolved by the upstream proxy, out of the
// guard's sight (Upstream). The address returned is the proxy's.
func (s *Proxy) connectVia(ctx context.Context, pol Policy, via *url.URL, host string, port uint16) (net.Conn, netip.AddrPort, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if err := s.checkAddr(pol, a); err != nil {
			return nil, netip.AddrPort{}, &refusal{status: 403, tag: "blocked-by-address", msg: fmt.Sprintf("%s is not reachable from the sandbox", host), err: err}
		}
	}
	dctx, cancel := context.WithTimeout(ctx, s.DialTimeout)
	defer cancel()
	conn, err := s.Upstream.Connect(dctx, s.Dial, via, host, port)
	if err != nil {
		return nil, netip.AddrPort{}, &refusal{status: 502, tag: "upstream-proxy-failed",
			msg: fmt.Sprintf("the upstream proxy did not connect %s port %d", host, port), err: err}
	}
	ap, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	return conn, ap, nil
}

// resolve returns host's addresses; an IP literal is its own answer.
func (s *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	return lookup(ctx, s.Resolver, s.DNSTimeout, host)
}

// lookup resolves host with r, each try bounded by timeout; an address
// literal is itself.
func lookup(ctx context.Context, r Resolver, timeout time.Duration, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
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
func (c *clientConn) decide(ctx context.Context, g grant, req *http1.Request) (net.Conn, netip.AddrPort) {
	s := c.s
	conn, ap, err := s.connect(ctx, g.policy, req.Host, req.Port)
	e := event{kind: "decision", label: s.Label, client: c.client, method: req.Method, host: req.Host, port: req.Port, addr: ap}
	if err != nil {
		var r *refusal
		errors.As(err, &r)
		e.verdict, e.reason = "deny", r.tag+": "+err.Error()
		if r.status != 403 {
			e.verdict = "error"
		}
		s.Audit.record(e)
		s.Log.Info("egress: refused", "proxy", s.Label, "client", c.client, "method", req.Method, "host", req.Host, "port", req.Port, "err", err)
		writeRefusal(c.bw, r.status, r.tag, r.msg)
		return nil, ap
	}
	e.verdict = "allow"
	s.Audit.record(e)
	return conn, ap
}
