package http1

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Framing is how a message body is delimited on the wire.
type Framing struct {
	Kind   Kind
	Length int64 // for ByLength
}

// Kind is one of the ways a body can be delimited.
type Kind int

const (
	NoBody   Kind = iota
	ByLength      // Content-Length
	Chunked       // Transfer-Encoding: chunked
	ByClose       // response read until the connection closes
)

// bodyFraming applies RFC 9112 §6.3 to a header section. It refuses every
// ambiguous combination instead of picking one reading, because a proxy that
// reads a message differently from the next hop is how smuggling works.
func bodyFraming(h Header, http10 bool) (Framing, error) {
	te := h.values("Transfer-Encoding")
	cl := h.values("Content-Length")
	if len(te) > 0 && len(cl) > 0 {
		return Framing{}, badRequest("Content-Length together with Transfer-Encoding")
	}
	if len(te) > 0 {
		if http10 {
			return Framing{}, badRequest("Transfer-Encoding in an HTTP/1.0 message")
		}
		codings := h.tokens("Transfer-Encoding")
		for _, c := range codings {
			if !isToken(c) {
				return Framing{}, badRequest("malformed Transfer-Encoding %q", strings.Join(te, ", "))
			}
		}
		if len(codings) != 1 || codings[0] != "chunked" {
			return Framing{}, &Error{Status: 501, Reason: fmt.Sprintf("unsupported Transfer-Encoding %q: only chunked", strings.Join(te, ", "))}
		}
		return Framing{Kind: Chunked}, nil
	}
	if len(cl) > 0 {
		n, err := contentLength(cl)
		if err != nil {
			return Framing{}, err
		}
		return Framing{Kind: ByLength, Length: n}, nil
	}
	return Framing{Kind: NoBody}, nil
}

// contentLength accepts repeated Content-Length values only when they agree.
func contentLength(values []string) (int64, error) {
	n := int64(-1)
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			e = strings.Trim(e, " \t")
			if e == "" || len(e) > 18 || strings.TrimLeft(e, "0123456789") != "" {
				return 0, badRequest("invalid Content-Length %q", v)
			}
			m, _ := strconv.ParseInt(e, 10, 64)
			if n >= 0 && m != n {
				return 0, badRequest("conflicting Content-Length values")
			}
			n = m
		}
	}
	return n, nil
}

func writeFraming(w *bufio.Writer, f Framing) {
	switch f.Kind {
	case ByLength:
		w.WriteString("Content-Length: " + strconv.FormatInt(f.Length, 10) + "\r\n")
	case Chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
}

// chunkedReader decodes a chunked body (RFC 9112 §7.1) strictly and drops
// its trailer section, whose fields would need the same vetting as headers.
type chunkedReader struct {
	br   *bufio.Reader
	left int64 // bytes left in the current chunk
	done bool
	err  error
}

// maxChunk bounds a chunk size so that arithmetic on it cannot overflow.
const maxChunk = 1 << 60

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		if c.err = c.nextChunk(); c.err != nil {
			return 0, c.err
		}
		if c.done {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && c.left == 0 {
		err = c.chunkEnd()
	}
	c.err = err
	return n, err
}

// chunkEnd consumes the CRLF after a chunk's data.
func (c *chunkedReader) chunkEnd() error {
	line, err := readLine(c.br)
	if err != nil {
		return err
	}
	if line != "" {
		return badRequest("chunk data longer than its size")
	}
	return nil
}

// nextChunk reads a chunk-size line, or the last chunk and the trailers.
func (c *chunkedReader) nextChunk() error {
	line, err := readLine(c.br)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	size, ext, _ := strings.Cut(line, ";")
	size = strings.TrimRight(size, " \t") // BWS before a chunk extension
	if size == "" || len(size) > 15 {
		return badRequest("invalid chunk size %q", size)
	}
	n, err := strconv.ParseInt(size, 16, 64)
	if err != nil || n < 0 || n > maxChunk || strings.ContainsAny(size, "+-xX_") {
		return badRequest("invalid chunk size %q", size)
	}
	if !validValue(ext) {
		return badRequest("invalid chunk extension")
	}
	if n == 0 {
		if _, err := readHeader(c.br); err != nil { // trailer section, dropped
			return err
		}
		c.done = true
		return nil
	}
	c.left = n
	return nil
}

// chunkedWriter frames what is written to it as chunks; Close writes the
// last chunk. It never buffers beyond the underlying bufio.Writer.
type chunkedWriter struct{ w *bufio.Writer }

func (c chunkedWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.w.WriteString(strconv.FormatInt(int64(len(p)), 16) + "\r\n")
	c.w.Write(p)
	_, err := c.w.WriteString("\r\n")
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c chunkedWriter) Close() error {
	_, err := c.w.WriteString("0\r\n\r\n")
	return err
}

// BodyReader returns a reader for a body framed as f; it returns
// io.ErrUnexpectedEOF if the connection ends early.
func BodyReader(br *bufio.Reader, f Framing) io.Reader {
	switch f.Kind {
	case ByLength:
		return &exactReader{r: br, left: f.Length}
	case Chunked:
		return &chunkedReader{br: br}
	case ByClose:
		return br
	}
	return strings.NewReader("")
}

// exactReader is io.LimitReader that also refuses to end short.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = io.ErrUnexpectedEOF
	} else if err == io.EOF {
		err = nil
	}
	return n, err
}

// bodyBuffers are CopyBody's buffers, reused: a fresh 32 KiB for every
// response, however small, was most of what the proxy allocated on runs of
// small requests, and the collections it caused were their p99.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// CopyBody moves a de-framed body from src into dst under framing out and
// flushes; it tells read errors (the sender's fault) from write errors.
func CopyBody(dst *bufio.Writer, src io.Reader, out Framing) (n int64, rerr, werr error) {
	var w io.Writer = dst
	if out.Kind == Chunked {
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
	if out.Kind == Chunked {
		if werr = (chunkedWriter{dst}).Close(); werr != nil {
			return n, nil, werr
		}
	}
	return n, nil, dst.Flush()
}
