package egress

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
)

// forward carries out one plain-HTTP exchange and reports whether the
// client connection may carry another.
func (c *clientConn) forward(ctx context.Context, g grant, req *http1.Request) bool {
	start := time.Now()
	key := g.key + "\x00" + req.Authority
	if c.up != nil && c.up.key != key {
		c.dropUpstream()
	}
	reused := c.up != nil
	if reused {
		c.s.Audit.record(event{kind: "decision", label: c.s.Label, client: c.client, method: req.Method, host: req.Host, port: req.Port,
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
	c.s.Audit.record(event{kind: "close", label: c.s.Label, client: c.client, method: req.Method, host: req.Host, port: req.Port,
		addr: x.addr, status: x.status, up: x.up, down: x.down, elapsed: time.Since(start), reason: x.reason})
	return x.clientKeep
}

func (c *clientConn) setUpstream(key string, conn net.Conn, ap netip.AddrPort) {
	ic := &idleConn{Conn: conn, idle: c.s.IdleTimeout, act: c.act}
	c.up = &upstream{key: key, raw: conn, addr: ap,
		br: bufio.NewReaderSize(ic, http1.BufSize), bw: bufio.NewWriterSize(ic, http1.BufSize)}
}

// exchange is one request and its response on a client connection.
type exchange struct {
	c          *clientConn
	req        *http1.Request
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
	out := req.Body
	http1.WriteRequestHead(up.bw, req, out)
	if err := up.bw.Flush(); err != nil {
		if reused && req.Body.Kind == http1.NoBody {
			return false, true
		}
		x.fail(502, "upstream-failed", "the upstream server closed the connection", err)
		return false, false
	}

	// The body goes up in its own goroutine while the response is awaited,
	// so that an upstream that answers early (or sends 100 Continue) works.
	bodyDone := make(chan error, 1)
	bodyFinished := req.Body.Kind == http1.NoBody
	if !bodyFinished {
		go func() {
			n, rerr, werr := http1.CopyBody(up.bw, http1.BodyReader(c.br, req.Body), out)
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

	var resp *http1.Response
	var err error
	for {
		resp, err = http1.ReadResponse(up.br, req.Method)
		if err != nil {
			break
		}
		if resp.Status >= 200 || resp.Status == 101 {
			break
		}
		if !req.HTTP10 { // interim responses (100 Continue, 103) go through
			http1.WriteResponseHead(c.bw, resp, resp.Header.EndToEnd(), http1.Framing{Kind: http1.NoBody})
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
				var pe *http1.Error
				if errors.As(berr, &pe) {
					x.fail(400, "bad-request", pe.Reason, berr)
					return false, false
				}
			default:
			}
		}
		var pe *http1.Error
		if errors.As(err, &pe) {
			x.fail(502, "bad-upstream-response", pe.Reason, err)
			return false, false
		}
		if reused && req.Body.Kind == http1.NoBody && errors.Is(err, io.EOF) {
			return false, true
		}
		x.fail(502, "upstream-failed", "the upstream server closed the connection before responding", err)
		return false, false
	}
	x.status = resp.Status

	if resp.Status == 101 {
		x.upgrade(resp)
		return false, false
	}

	// How the body reaches the client: its length if known, else chunked,
	// else (HTTP/1.0 client) until close.
	toClient := resp.Body
	if toClient.Kind == http1.Chunked || toClient.Kind == http1.ByClose {
		toClient.Kind = http1.Chunked
		if req.HTTP10 {
			toClient.Kind = http1.ByClose
		}
	}
	x.clientKeep = !req.Close && toClient.Kind != http1.ByClose
	fields := resp.Header.EndToEnd()
	if resp.Body.Kind != http1.NoBody {
		fields = resp.Header.EndToEnd("Content-Length")
	}
	http1.WriteResponseHead(c.bw, resp, fields, toClient)
	if !x.clientKeep {
		c.bw.WriteString("Connection: close\r\n")
	} else if req.HTTP10 {
		c.bw.WriteString("Connection: keep-alive\r\n")
	}
	c.bw.WriteString("\r\n")
	var n int64
	var rerr, werr error
	if resp.Body.Kind == http1.ByLength {
		n, rerr, werr = spliceBody(c.bw, c.raw, up.br, up.raw, resp.Body.Length, c.s.IdleTimeout, c.act)
	} else {
		n, rerr, werr = http1.CopyBody(c.bw, http1.BodyReader(up.br, resp.Body), toClient)
	}
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
	return !resp.Close, false
}

// fail answers the client with an error status, if nothing of the response
// has been written yet.
func (x *exchange) fail(status int, tag, msg string, err error) {
	x.status, x.reason, x.clientKeep = status, tag+": "+err.Error(), false
	x.c.s.Log.Info("egress: exchange failed", "proxy", x.c.s.Label, "client", x.c.client, "host", x.req.Host, "status", status, "err", err)
	writeRefusal(x.c.bw, status, tag, msg)
}

// upgrade relays a 101 for a WebSocket handshake and then splices both
// connections; any other 101 is refused.
func (x *exchange) upgrade(resp *http1.Response) {
	c, up := x.c, x.c.up
	if !x.req.Websocket || !strings.EqualFold(strings.Trim(resp.Header.Get("Upgrade"), " \t"), "websocket") {
		x.fail(502, "bad-upstream-response", "upstream switched protocols without being asked for websocket", errors.New("unexpected 101"))
		return
	}
	http1.WriteResponseHead(c.bw, resp, resp.Header.EndToEnd(), http1.Framing{Kind: http1.NoBody})
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

// spliceBody relays a response body of known length the way CONNECT relays
// a tunnel: first what the upstream's reader already holds, through the
// client's writer, then straight from one TCP connection to the other, which
// Go does with splice(2), so that no byte of a large download is copied
// through the proxy's memory (CopyBody moves every byte through user space).
// Idleness is watched with read deadlines only, as in relay: a deadline on
// the write side would make the kernel drop what the splice holds.
func spliceBody(dst *bufio.Writer, dstRaw net.Conn, src *bufio.Reader, srcRaw net.Conn, length int64, idle time.Duration, act *activity) (n int64, rerr, werr error) {
	if held := min(int64(src.Buffered()), length); held > 0 {
		m, err := io.CopyN(dst, src, held)
		n += m
		if err != nil {
			return n, nil, err
		}
	}
	if werr = dst.Flush(); werr != nil {
		return n, nil, werr
	}
	defer srcRaw.SetReadDeadline(time.Time{})
	for n < length {
		if idle > 0 {
			srcRaw.SetReadDeadline(time.Now().Add(idle / 2))
		}
		m, err := io.CopyN(dstRaw, srcRaw, length-n)
		n += m
		if m > 0 {
			act.touch()
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return n, io.ErrUnexpectedEOF, nil
		case errors.Is(err, os.ErrDeadlineExceeded) && !act.quietFor(idle):
		default:
			return n, err, nil
		}
	}
	return n, nil, nil
}
