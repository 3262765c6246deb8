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
	"strconv"
	"strings"
	"sync"
	"time"
)

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
	var n int64
	var rerr, werr error
	if resp.body.kind == byLength {
		n, rerr, werr = spliceBody(c.bw, c.raw, up.br, up.raw, resp.body.length, c.s.IdleTimeout, c.act)
	} else {
		n, rerr, werr = copyBody(c.bw, bodyReader(up.br, resp.body), toClient)
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

// spliceBody relays a response body of known length the way CONNECT relays
// a tunnel: first what the upstream's reader already holds, through the
// client's writer, then straight from one TCP connection to the other, which
// Go does with splice(2), so that no byte of a large download is copied
// through the proxy's memory (copyBody moves every byte through user space).
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

// bodyBuffers are copyBody's buffers, reused: a fresh 32 KiB for every
// response, however small, was most of what the proxy allocated on runs of
// small requests, and the collections it caused were their p99.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody moves a de-framed body from src into dst under framing out and
// flushes; it tells read errors (the sender's fault) from write errors.
func copyBody(dst *bufio.Writer, src io.Reader, out framing) (n int64, rerr, werr error) {
	var w io.Writer = dst
	if out.kind == chunked {
		w = chunkedWriter{dst}
	}
	bufp := bodyBuffers.Get().(*[]byte)
	defer bodyBuffers.Put(bufp)
	buf := *bufp
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
