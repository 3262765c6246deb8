package http1

import (
	"bufio"
	"errors"
	"io"
	"strings"
)

// Field is one header field as received; order and spelling are kept.
type Field struct{ Name, Value string }

// Header is a message's header section.
type Header []Field

// values returns every value of name, in order.
func (h Header) values(name string) []string {
	var out []string
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			out = append(out, f.Value)
		}
	}
	return out
}

// Get returns the first value of name, or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// tokens splits every value of a list-valued field (RFC 9110 §5.6.1) into
// lower-case elements, skipping empty ones.
func (h Header) tokens(name string) []string {
	var out []string
	for _, v := range h.values(name) {
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.ToLower(strings.Trim(e, " \t")); e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// hopByHop are the RFC 9110 §7.6.1 fields that describe one connection, not
// the message; a proxy never forwards them (plus every name that Connection
// lists).
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
	"Proxy-Authenticate", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
}

// EndToEnd returns the fields that may be forwarded: h without hop-by-hop
// fields, without the fields named in Connection, without drop.
func (h Header) EndToEnd(drop ...string) Header {
	named := h.tokens("Connection")
	out := make(Header, 0, len(h))
next:
	for _, f := range h {
		for _, lists := range [][]string{hopByHop, named, drop} {
			for _, n := range lists {
				if strings.EqualFold(f.Name, n) {
					continue next
				}
			}
		}
		out = append(out, f)
	}
	return out
}

// readLine returns one CRLF-terminated line without its CRLF. A bare LF or a
// CR anywhere else is refused: lenient line endings are a smuggling vector.
func readLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", badRequest("line longer than %d bytes", BufSize)
		}
		if err == io.EOF && len(b) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	if len(b) < 2 || b[len(b)-2] != '\r' {
		return "", badRequest("line ends in a bare LF")
	}
	line := b[:len(b)-2]
	for _, c := range line {
		if c == '\r' || c == '\n' || c == 0 {
			return "", badRequest("line holds a CR, LF or NUL byte")
		}
	}
	return string(line), nil
}

// readHeader reads a header section up to its empty line, validating the
// RFC 9110 grammar of every field.
func readHeader(br *bufio.Reader) (Header, error) {
	var h Header
	total := 0
	for {
		line, err := readLine(br)
		if err != nil {
			return nil, err
		}
		if line == "" {
			return h, nil
		}
		if total += len(line); total > maxHeaderBytes || len(h) >= maxHeaders {
			return nil, &Error{Status: 431, Reason: "header section too large"}
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, badRequest("obsolete line folding")
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, badRequest("header line without a colon")
		}
		if !isToken(name) {
			return nil, badRequest("header name %q is not a token", name)
		}
		value = strings.Trim(value, " \t")
		if !validValue(value) {
			return nil, badRequest("header %s holds a control character", name)
		}
		h = append(h, Field{name, value})
	}
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validValue accepts field-content: visible characters, obs-text, SP, HTAB.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func writeFields(w *bufio.Writer, h Header) {
	for _, f := range h {
		w.WriteString(f.Name + ": " + f.Value + "\r\n")
	}
}

// parseVersion reads an HTTP-version; only HTTP/1.1 and HTTP/1.0 are spoken.
func parseVersion(v string) (http10, ok bool) {
	switch v {
	case "HTTP/1.1":
		return false, true
	case "HTTP/1.0":
		return true, true
	}
	return false, false
}

// wantsClose says whether a message ends its connection (RFC 9112 §9.3):
// HTTP/1.1 keeps it unless Connection says close, HTTP/1.0 ends it unless
// Connection says keep-alive.
func wantsClose(h Header, http10 bool) bool {
	conn := h.tokens("Connection")
	return has(conn, "close") || http10 && !has(conn, "keep-alive")
}
