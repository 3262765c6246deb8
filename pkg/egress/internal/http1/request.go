package http1

import (
	"bufio"
	"strconv"
	"strings"
)

// Request is a parsed proxy request: where it goes and how its body is framed.
type Request struct {
	Method string
	HTTP10 bool
	Host   string // as the host normalizer gave it
	Port   uint16
	// Authority is host[:port] as the Host field gets it upstream; Path is
	// the origin-form target ("/x?y"). Both empty for CONNECT.
	Authority, Path string
	Header          Header
	Body            Framing
	Close           bool // the client wants the connection closed after this exchange
	Websocket       bool // a valid "Connection: upgrade" + "Upgrade: websocket"
}

// ReadRequest reads one request head. The request target decides the
// destination; a Host field is checked for grammar only and replaced.
// normalizeHost brings the target's host to the form the caller matches and
// dials (its error refuses the request), so the authority sent upstream is
// spelled as the host that was checked.
func ReadRequest(br *bufio.Reader, normalizeHost func(string) (string, error)) (*Request, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, version, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isToken(method) || target == "" {
		return nil, badRequest("malformed request line")
	}
	r := &Request{Method: method}
	var known bool
	if r.HTTP10, known = parseVersion(version); !known {
		if strings.HasPrefix(version, "HTTP/") && len(version) == 8 {
			return nil, &Error{Status: 505, Reason: "only HTTP/1.1 and HTTP/1.0 are spoken here"}
		}
		return nil, badRequest("malformed request line")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return nil, badRequest("request target holds a byte outside visible ASCII")
		}
	}
	if method == "CONNECT" {
		err = r.parseAuthority(target, "", normalizeHost)
	} else {
		err = r.parseAbsolute(target, normalizeHost)
	}
	if err != nil {
		return nil, err
	}
	if r.Header, err = readHeader(br); err != nil {
		return nil, err
	}
	if len(r.Header.values("Host")) > 1 {
		return nil, badRequest("more than one Host field")
	}
	if r.Body, err = bodyFraming(r.Header, r.HTTP10); err != nil {
		return nil, err
	}
	if method == "CONNECT" && (r.Body.Kind == Chunked || r.Body.Length > 0) {
		return nil, badRequest("CONNECT with a body")
	}
	r.Close = wantsClose(r.Header, r.HTTP10)
	r.Websocket = method == "GET" && has(r.Header.tokens("Connection"), "upgrade") &&
		strings.EqualFold(strings.Trim(r.Header.Get("Upgrade"), " \t"), "websocket")
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
func (r *Request) parseAbsolute(target string, normalizeHost func(string) (string, error)) error {
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
	r.Path = path
	return r.parseAuthority(authority, "80", normalizeHost)
}

// parseAuthority takes host[:port] without userinfo; defPort "" means the
// port is required (CONNECT).
func (r *Request) parseAuthority(authority, defPort string, normalizeHost func(string) (string, error)) error {
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
	h, err := normalizeHost(host)
	if err != nil {
		return badRequest("request target: %v", err)
	}
	r.Host, r.Port = h, uint16(n)
	if strings.Contains(r.Host, ":") {
		h = "[" + h + "]"
	}
	r.Authority = h
	if r.Method == "CONNECT" || n != 80 {
		r.Authority = h + ":" + strconv.Itoa(int(n))
	}
	return nil
}

// WriteRequestHead writes r upstream in origin form with body framing fresh
// from out: whatever framing the client used is gone by now.
func WriteRequestHead(w *bufio.Writer, r *Request, out Framing) {
	w.WriteString(r.Method + " " + r.Path + " HTTP/1.1\r\nHost: " + r.Authority + "\r\n")
	writeFields(w, r.Header.EndToEnd("Host", "Content-Length"))
	writeFraming(w, out)
	if r.Websocket {
		w.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\n")
	}
	w.WriteString("\r\n")
}
