// Package http1 is the proxy's HTTP/1.1 codec: it reads request and response
// heads, decides how each body is framed, and writes messages back out. It
// exists instead of net/http because a proxy must refuse ambiguous framing
// (request smuggling), drop every hop-by-hop header in both directions, and
// validate an upstream response completely before a byte of it reaches the
// client, none of which net/http lets its caller decide.
package http1

import "fmt"

// Limits on what the parser holds in memory for one message head. BufSize is
// also the size of the bufio readers and writers the caller gives the codec.
const (
	BufSize        = 16 << 10 // also the longest line: request line, status line, header field, chunk size
	maxHeaderBytes = 64 << 10
	maxHeaders     = 128
)

// Error is a message the proxy refuses to forward, with the status the
// client gets for it: 400 for a bad request, 502 for a bad upstream response.
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Reason) }

func badRequest(format string, args ...any) error {
	return &Error{Status: 400, Reason: fmt.Sprintf(format, args...)}
}
