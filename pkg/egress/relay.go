package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// activity is the time of the last byte moved on a pair of connections, so
// that a quiet direction does not time out while the other one is busy.
type activity struct {
	last atomic.Int64
	// drained[d] says that direction d of a relay last came back from a
	// read deadline with nothing moved, or has ended: it is known to be
	// quiet, not merely waiting for the scheduler.
	drained [2]atomic.Bool
}

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// quietFor reports whether nothing moved for at least d.
func (a *activity) quietFor(d time.Duration) bool {
	return time.Since(time.Unix(0, a.last.Load())) >= d
}

// relay copies a→b and b→a until both directions have ended. Each direction
// that reaches EOF closes only the write side of its destination
// (half-close: docs/failures.md#relays-close-each-direction-on-its-own), so a
// reply still in flight the other way is delivered. Any other error, idle for
// longer than idle (if idle > 0), or the end of ctx aborts both directions.
// It returns the bytes moved each way.
func relay(ctx context.Context, a, b net.Conn, idle time.Duration) (ab, ba int64) {
	act := newActivity()
	abort := func() { a.Close(); b.Close() }
	stop := context.AfterFunc(ctx, abort)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ab = pump(b, a, idle, act, 0, abort)
	}()
	ba = pump(a, b, idle, act, 1, abort)
	<-done
	abort()
	return ab, ba
}

// pump copies src to dst for relay as direction dir (0 or 1). It wakes every
// idle/2 through a read deadline to see whether the pair has gone idle: that
// takes both directions having seen a window with nothing to move, and no
// byte either way for idle. (A direction starved of CPU on a loaded machine
// must not count as quiet.) Only read deadlines are used: the kernel splice
// that io.Copy uses between TCP connections drops what it holds when a write
// deadline interrupts it.
func pump(dst, src net.Conn, idle time.Duration, act *activity, dir int, abort func()) int64 {
	var total int64
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle / 2))
		}
		n, err := io.Copy(dst, src)
		total += n
		if n > 0 {
			act.touch()
		}
		timedOut := idle > 0 && errors.Is(err, os.ErrDeadlineExceeded)
		act.drained[dir].Store(err == nil || timedOut && n == 0)
		switch {
		case err == nil: // EOF from src: pass it on, leave the other way open
			if closeWrite(dst) != nil {
				abort()
			}
			return total
		case timedOut && !(act.drained[1-dir].Load() && act.quietFor(idle)):
			continue
		default:
			abort()
			return total
		}
	}
}

// closeWrite half-closes c if it can; a conn that cannot is closed whole.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// idleConn times out reads and writes that make no progress for idle, where
// progress on any conn sharing act counts: a request body trickling in keeps
// the wait for its response alive.
type idleConn struct {
	net.Conn
	idle time.Duration
	act  *activity
}

func (c *idleConn) Read(p []byte) (int, error) {
	for {
		if c.idle > 0 {
			c.Conn.SetReadDeadline(time.Now().Add(c.idle / 2))
		}
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.act.touch()
		}
		if n == 0 && c.idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && !c.act.quietFor(c.idle) {
			continue
		}
		return n, err
	}
}

func (c *idleConn) Write(p []byte) (int, error) {
	if c.idle > 0 {
		c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	}
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}
