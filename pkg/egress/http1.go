package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits on what the parser holds in memory for one message head.
const (
	readBufSize    = 16 << 10 // also the longest line: request line, status line, header field, chunk size
	maxHeaderBytes = 64 << 10
	maxHeaders     = 128
)

// protoError is a message the proxy refuses to forward, with the status the
// client gets for it: 400 for a bad request, 502 for a bad upstream response.
type protoError struct {
	status int
	reason string
}

func (e *protoError) Error() string { return fmt.Sprintf("%d %s", e.status, e.reason) }

func badRequest(format string, args ...any) error {
	return &protoError{status: 400, reason: fmt.Sprintf(format, args...)}
}

// field is one header field as received; order and spelling are kept.
type field struct{ name, value string }

// header is a message's header section.
type header []field

// values returns every value of name, in order.
func (h header) values(name string) []string {
	var out []string
	for _, f := range h {
		if strings.EqualFold(f.name, name) {
			out = append(out, f.value)
		}
	}
	return out
}

func (h header) get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.name, name) {
			return f.value
		}
	}
	return ""
}

// tokens splits every value of a list-valued field (RFC 9110 §5.6.1) into
// lower-case elements, skipping empty ones.
func (h header) tokens(name string) []string {
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

// endToEnd returns the fields that may be forwarded: h without hop-by-hop
// fields, without the fields named in Connection, without drop.
func (h header) endToEnd(drop ...string) header {
	named := h.tokens("Connection")
	out := make(header, 0, len(h))
next:
	for _, f := range h {
		for _, lists := range [][]string{hopByHop, named, drop} {
			for _, n := range lists {
				if strings.EqualFold(f.name, n) {
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
			return "", badRequest("line longer than %d bytes", readBufSize)
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
func readHeader(br *bufio.Reader) (header, error) {
	var h header
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
			return nil, &protoError{status: 431, reason: "header section too large"}
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
		h = append(h, field{name, value})
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

// framing is how a message body is delimited on the wire.
type framing struct {
	kind   frameKind
	length int64 // for byLength
}

type frameKind int

const (
	noBody   frameKind = iota
	byLength           // Content-Length
	chunked            // Transfer-Encoding: chunked
	byClose            // response read until the connection closes
)

// bodyFraming applies RFC 9112 §6.3 to a header section. It refuses every
// ambiguous combination instead of picking one reading, because a proxy that
// reads a message differently from the next hop is how smuggling works.
func bodyFraming(h header, http10 bool) (framing, error) {
	te := h.values("Transfer-Encoding")
	cl := h.values("Content-Length")
	if len(te) > 0 && len(cl) > 0 {
		return framing{}, badRequest("Content-Length together with Transfer-Encoding")
	}
	if len(te) > 0 {
		if http10 {
			return framing{}, badRequest("Transfer-Encoding in an HTTP/1.0 message")
		}
		codings := h.tokens("Transfer-Encoding")
		for _, c := range codings {
			if !isToken(c) {
				return framing{}, badRequest("malformed Transfer-Encoding %q", strings.Join(te, ", "))
			}
		}
		if len(codings) != 1 || codings[0] != "chunked" {
			return framing{}, &protoError{status: 501, reason: fmt.Sprintf("unsupported Transfer-Encoding %q: only chunked", strings.Join(te, ", "))}
		}
		return framing{kind: chunked}, nil
	}
	if len(cl) > 0 {
		n, err := contentLength(cl)
		if err != nil {
			return framing{}, err
		}
		return framing{kind: byLength, length: n}, nil
	}
	return framing{kind: noBody}, nil
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

// request is a parsed proxy request: where it goes and how its body is framed.
type request struct {
	method string
	http10 bool
	host   string // normalized (see NormalizeHost)
	port   uint16
	// authority is host[:port] as the Host field gets it upstream; path is
	// the origin-form target ("/x?y"). Both empty for CONNECT.
	authority, path string
	header          header
	body            framing
	close           bool // the client wants the connection closed after this exchange
	websocket       bool // a valid "Connection: upgrade" + "Upgrade: websocket"
}

// readRequest reads one request head. The request target decides the
// destination; a Host field is checked for grammar only and replaced.
func readRequest(br *bufio.Reader) (*request, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, version, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isToken(method) || target == "" {
		return nil, badRequest("malformed request line")
	}
	r := &request{method: method}
	switch version {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.http10 = true
	default:
		if strings.HasPrefix(version, "HTTP/") && len(version) == 8 {
			return nil, &protoError{status: 505, reason: "only HTTP/1.1 and HTTP/1.0 are spoken here"}
		}
		return nil, badRequest("malformed request line")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return nil, badRequest("request target holds a byte outside visible ASCII")
		}
	}
	if method == "CONNECT" {
		err = r.parseAuthority(target, "")
	} else {
		err = r.parseAbsolute(target)
	}
	if err != nil {
		return nil, err
	}
	if r.header, err = readHeader(br); err != nil {
		return nil, err
	}
	if len(r.header.values("Host")) > 1 {
		return nil, badRequest("more than one Host field")
	}
	if r.body, err = bodyFraming(r.header, r.http10); err != nil {
		return nil, err
	}
	if method == "CONNECT" && (r.body.kind == chunked || r.body.length > 0) {
		return nil, badRequest("CONNECT with a body")
	}
	conn := r.header.tokens("Connection")
	r.close = has(conn, "close") || r.http10 && !has(conn, "keep-alive")
	r.websocket = method == "GET" && has(conn, "upgrade") &&
		strings.EqualFold(strings.Trim(r.header.get("Upgrade"), " \t"), "websocket")
	return r, nil
}

func has(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// parseAbsolute takes an absolute-form target, the only form a forward proxy
// serves for plain HTTP.
func (r *request) parseAbsolute(target string) error {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		return badRequest("request target must be an absolute http:// URL (this is a proxy)")
	}
	switch strings.ToLower(scheme) {
	case "http":
	case "https":
		return badRequest("https:// URLs go through CONNECT")
	default:
		return badRequest("scheme %q is not proxied", scheme)
	}
	i := strings.IndexAny(rest, "/?")
	if i < 0 {
		i = len(rest)
	}
	authority, path := rest[:i], rest[i:]
	if strings.HasPrefix(path, "?") || path == "" {
		path = "/" + path
	}
	if strings.Contains(path, "#") {
		return badRequest("request target holds a fragment")
	}
	r.path = path
	return r.parseAuthority(authority, "80")
}

// parseAuthority takes host[:port] without userinfo; defPort "" means the
// port is required (CONNECT).
func (r *request) parseAuthority(authority, defPort string) error {
	if strings.Contains(authority, "@") {
		return badRequest("request target holds userinfo")
	}
	host, port := authority, defPort
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.HasSuffix(authority, "]") {
		host, port = authority[:i], authority[i+1:]
	}
	if port == "" {
		return badRequest("request target %q has no port", authority)
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return badRequest("request target %q: an IPv6 address needs brackets", authority)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || strings.TrimLeft(port, "0123456789") != "" {
		return badRequest("request target %q has an invalid port", authority)
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return badRequest("request target: %v", err)
	}
	r.host, r.port = h, uint16(n)
	if strings.Contains(r.host, ":") {
		h = "[" + h + "]"
	}
	r.authority = h
	if r.method == "CONNECT" || n != 80 {
		r.authority = h + ":" + strconv.Itoa(int(n))
	}
	return nil
}

// writeRequestHead writes r upstream in origin form with body framing fresh
// from out: whatever framing the client used is gone by now.
func writeRequestHead(w *bufio.Writer, r *request, out framing) {
	w.WriteString(r.method + " " + r.path + " HTTP/1.1\r\nHost: " + r.authority + "\r\n")
	writeFields(w, r.header.endToEnd("Host", "Content-Length"))
	writeFraming(w, out)
	if r.websocket {
		w.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\n")
	}
	w.WriteString("\r\n")
}

func writeFields(w *bufio.Writer, h header) {
	for _, f := range h {
		w.WriteString(f.name + ": " + f.value + "\r\n")
	}
}

func writeFraming(w *bufio.Writer, f framing) {
	switch f.kind {
	case byLength:
		w.WriteString("Content-Length: " + strconv.FormatInt(f.length, 10) + "\r\n")
	case chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
}

// response is a parsed upstream response head.
type response struct {
	status int
	reason string
	http10 bool
	header header
	body   framing
	close  bool
}

// readResponse reads one response head and its framing for a request of
// method; any grammar fault is a 502 so nothing of it reaches the client.
func readResponse(br *bufio.Reader, method string) (*response, error) {
	resp, err := readResponseHead(br, method)
	var pe *protoError
	if errors.As(err, &pe) {
		return nil, &protoError{status: 502, reason: "upstream sent an invalid response: " + pe.reason}
	}
	return resp, err
}

func readResponseHead(br *bufio.Reader, method string) (*response, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	version, rest, _ := strings.Cut(line, " ")
	code, reason, _ := strings.Cut(rest, " ")
	r := &response{reason: reason}
	switch version {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.http10 = true
	default:
		return nil, badRequest("malformed status line")
	}
	if len(code) != 3 || strings.TrimLeft(code, "0123456789") != "" || code[0] == '0' {
		return nil, badRequest("malformed status code")
	}
	r.status, _ = strconv.Atoi(code)
	if !validValue(reason) {
		return nil, badRequest("reason phrase holds a control character")
	}
	if r.header, err = readHeader(br); err != nil {
		return nil, err
	}
	conn := r.header.tokens("Connection")
	r.close = has(conn, "close") || r.http10 && !has(conn, "keep-alive")
	switch {
	case r.status < 200, r.status == 204, r.status == 304, method == "HEAD":
		r.body = framing{kind: noBody}
		return r, nil
	}
	if r.body, err = bodyFraming(r.header, r.http10); err != nil {
		return nil, err
	}
	if r.body.kind == noBody {
		r.body.kind, r.close = byClose, true
	}
	return r, nil
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

// bodyReader returns a reader for a body framed as f; it returns
// io.ErrUnexpectedEOF if the connection ends early.
func bodyReader(br *bufio.Reader, f framing) io.Reader {
	switch f.kind {
	case byLength:
		return &exactReader{r: br, left: f.length}
	case chunked:
		return &chunkedReader{br: br}
	case byClose:
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
