package egress

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
)

// tunnel carries out CONNECT: a 200, then bytes both ways until both ends
// are done.
func (c *clientConn) tunnel(ctx context.Context, g grant, req *http1.Request) {
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
	c.s.Audit.record(event{kind: "close", label: c.s.Label, client: c.client, method: req.Method, host: req.Host, port: req.Port,
		addr: ap, status: 200, up: early + ab, down: ba, elapsed: time.Since(start)})
}
