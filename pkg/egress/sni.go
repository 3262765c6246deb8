package egress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
)

// The name a caught connection carries in its first bytes: the server
// name of a TLS ClientHello, or the Host header of an HTTP/1 request. The
// listener only reads them (and forwards them unchanged); it never takes
// part in the TLS handshake.

// errNotPeekable says the first bytes are neither a ClientHello nor an
// HTTP request head, or are malformed: the connection carries no name.
var errNotPeekable = errors.New("no TLS ClientHello or HTTP request")

// errMalformed says the first bytes are a ClientHello or an HTTP request
// head that cannot be read with certainty (malformed, too long, two Host
// headers): the connection is refused rather than let through unnamed.
var errMalformed = errors.New("a TLS ClientHello or HTTP request that cannot be read")

// maxPeek bounds what is read to find the name: a ClientHello with
// post-quantum key shares is about 2 KiB; an HTTP head is bounded as the
// proxy bounds it.
const maxPeek = 16 << 10

// peekedName returns the name carried by b, the first bytes of a
// connection. more says that b is a prefix of something that may carry
// one: read more and ask again. A ClientHello without a server name, or
// an HTTP request without Host, gives "" and no error.
func peekedName(b []byte) (name string, more bool, err error) {
	if len(b) == 0 {
		return "", true, nil
	}
	if b[0] == 0x16 {
		return clientHelloServerName(b)
	}
	return httpHost(b)
}

// clientHelloServerName reads the server_name extension (RFC 6066 §3) of
// the ClientHello that starts b, which may span several handshake records.
func clientHelloServerName(b []byte) (string, bool, error) {
	// Gather the handshake message from consecutive records.
	var hs []byte
	for len(b) > 0 {
		if len(b) < 5 {
			return "", true, nil
		}
		if b[0] != 0x16 || b[1] != 3 {
			if len(hs) == 0 {
				return "", false, errNotPeekable
			}
			return "", false, errMalformed
		}
		n := int(binary.BigEndian.Uint16(b[3:5]))
		if n == 0 || n > 1<<14+2048 {
			return "", false, errMalformed
		}
		if len(b) < 5+n {
			hs = append(hs, b[5:]...)
			break
		}
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
		if len(hs) >= 4 && len(hs) >= 4+int(uint32(hs[1])<<16|uint32(hs[2])<<8|uint32(hs[3])) {
			break
		}
	}
	if len(hs) < 4 {
		return "", true, nil
	}
	if hs[0] != 1 { // client_hello
		return "", false, errMalformed
	}
	n := int(uint32(hs[1])<<16 | uint32(hs[2])<<8 | uint32(hs[3]))
	if n > maxPeek {
		return "", false, errMalformed
	}
	if len(hs) < 4+n {
		return "", true, nil
	}
	r := reader(hs[4 : 4+n])
	if !r.skip(2+32) || !r.skipVec(1) || !r.skipVec(2) || !r.skipVec(1) {
		return "", false, errMalformed
	}
	if r.empty() {
		return "", false, nil // no extensions at all
	}
	exts, ok := r.vec(2)
	if !ok {
		return "", false, errMalformed
	}
	for !exts.empty() {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return "", false, errMalformed
		}
		if typ != 0 { // server_name
			continue
		}
		list, ok := data.vec(2)
		if !ok {
			return "", false, errMalformed
		}
		for !list.empty() {
			kind, ok1 := list.u8()
			name, ok2 := list.vec(2)
			if !ok1 || !ok2 {
				return "", false, errMalformed
			}
			if kind == 0 { // host_name
				if len(name) == 0 {
					return "", false, errMalformed
				}
				return string(name), false, nil
			}
		}
		return "", false, nil
	}
	return "", false, nil
}

// httpHost reads the Host header of the HTTP/1 request head that starts b.
func httpHost(b []byte) (string, bool, error) {
	method, _, found := bytes.Cut(b, []byte(" "))
	if !found {
		if len(b) > 16 || !isToken(b) {
			return "", false, errNotPeekable
		}
		return "", true, nil
	}
	if len(method) == 0 || len(method) > 16 || !isToken(method) {
		return "", false, errNotPeekable
	}
	first, _, complete := bytes.Cut(b, []byte("\r\n"))
	if complete && !bytes.Contains(first, []byte(" HTTP/1.")) {
		return "", false, errNotPeekable
	}
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) >= maxPeek {
			if complete {
				return "", false, errMalformed
			}
			return "", false, errNotPeekable
		}
		return "", true, nil
	}
	lines := strings.Split(string(b[:end]), "\r\n")
	host, seen := "", false
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "host") {
			continue
		}
		if seen { // two Host headers: which one the server takes is not ours to guess
			return "", false, errMalformed
		}
		host, seen = strings.TrimSpace(v), true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if seen && host == "" {
		return "", false, errMalformed
	}
	return host, false, nil
}

func isToken(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// reader reads TLS's length-prefixed vectors.
type reader []byte

func (r *reader) empty() bool { return len(*r) == 0 }

func (r *reader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *reader) u8() (byte, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return v, true
}

// vec reads a vector whose length takes lenBytes (1 or 2) bytes.
func (r *reader) vec(lenBytes int) (reader, bool) {
	var n int
	switch lenBytes {
	case 1:
		v, ok := r.u8()
		if !ok {
			return nil, false
		}
		n = int(v)
	default:
		v, ok := r.u16()
		if !ok {
			return nil, false
		}
		n = int(v)
	}
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) skipVec(lenBytes int) bool {
	_, ok := r.vec(lenBytes)
	return ok
}
