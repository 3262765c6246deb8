package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
)

// smugglingSeeds are request shapes that front-end/back-end disagreements
// have been built from; the seed corpus in testdata/fuzz holds more.
var smugglingSeeds = []string{
	"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://b.example/ HTTP/1.1\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\nTransfer-Encoding: chunked\n\n0\n\n",
	"POST http://a.example/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"POST http://a.example/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhello",
	"POST http://a.example/ HTTP/1.1\r\nContent-Length: 0x5\r\n\r\nhello",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5 ; a=b\r\nhello\r\n0\r\nTrailer: x\r\n\r\n",
	"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\rhello\r\n0\r\n\r\n",
	"GET http://a.example@b.example/ HTTP/1.1\r\n\r\n",
	"GET http://a.example:80\\@b.example/ HTTP/1.1\r\n\r\n",
	"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
	"CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
	"GET http://a.example/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET http://a.example/ HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET http://xn--bcher-kva.example/ HTTP/1.1\r\n\r\n",
}

// FuzzReadRequest feeds arbitrary bytes to the request parser and the body
// decoder. Whatever it accepts must forward as a message that our own parser
// reads back the same way, with exactly the body that was decoded, and with
// no byte that could end a line or a field early: that is the property that
// makes smuggling through the proxy impossible.
func FuzzReadRequest(f *testing.F) {
	for _, s := range smugglingSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), http1.BufSize)
		req, err := http1.ReadRequest(br, NormalizeHost)
		if err != nil {
			return
		}
		if req.Body.Kind == http1.ByLength && req.Body.Length > 1<<20 {
			return // would only read to EOF
		}
		body, err := io.ReadAll(http1.BodyReader(br, req.Body))
		if err != nil {
			return
		}
		for _, f := range req.Header {
			if strings.ContainsAny(f.Name+f.Value, "\r\n\x00") {
				t.Fatalf("field %q: %q holds a line break or NUL", f.Name, f.Value)
			}
		}
		if req.Method == "CONNECT" {
			return
		}
		// Forward as the proxy does and parse the result as the upstream
		// would (in origin form, so turn it back into absolute form).
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		http1.WriteRequestHead(w, req, req.Body)
		_, rerr, werr := http1.CopyBody(w, bytes.NewReader(body), req.Body)
		if rerr != nil || werr != nil {
			t.Fatalf("copy body: %v %v", rerr, werr)
		}
		wire := out.String()
		line, rest, _ := strings.Cut(wire, "\r\n")
		m, path, _ := strings.Cut(line, " ")
		path = strings.TrimSuffix(path, " HTTP/1.1")
		again := m + " http://" + req.Authority + path + " HTTP/1.1\r\n" + rest
		br2 := bufio.NewReaderSize(strings.NewReader(again), http1.BufSize)
		req2, err := http1.ReadRequest(br2, NormalizeHost)
		if err != nil {
			t.Fatalf("forwarded request does not parse: %v\n%q", err, again)
		}
		body2, err := io.ReadAll(http1.BodyReader(br2, req2.Body))
		if err != nil {
			t.Fatalf("forwarded body does not parse: %v\n%q", err, again)
		}
		if req2.Method != req.Method || req2.Host != req.Host || req2.Port != req.Port || req2.Path != req.Path {
			t.Fatalf("forwarded request changed target: %+v -> %+v", req, req2)
		}
		if !bytes.Equal(body, body2) {
			t.Fatalf("forwarded body changed: %q -> %q", body, body2)
		}
		if _, err := br2.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("bytes left over after the forwarded request: %q", again)
		}
	})
}

// FuzzMatchHost checks the allowlist matcher's promises for arbitrary
// patterns and hosts: a pattern always matches its own name, "*.x" matches
// only names strictly below x, and matching is a plain suffix comparison of
// normalized names, never reaching an IP literal through a wildcard.
func FuzzMatchHost(f *testing.F) {
	for _, s := range [][2]string{
		{"example.com", "example.com"}, {"*.example.com", "a.example.com"}, {"*.example.com", "example.com"},
		{"*.bücher.example", "xn--bcher-kva.example"}, {"*.3.4", "1.2.3.4"}, {"pypi.org", "PYPI.ORG."},
		{"*.example.com", "a.example.com.evil"}, {"*.EXAMPLE.com.", "x.Example.COM"}, {"a_b.example", "A_B.example"},
		{"*.xn--bcher-kva.example", "SHOP.BÜCHER.EXAMPLE"}, {"ｅｘａｍｐｌｅ.com", "example.com"}, {"10.0.0.1", "010.0.0.1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		p, err := ParsePolicy("allowlist", []string{pattern}, nil)
		if err != nil {
			return
		}
		pat := p.AllowedHosts[0]
		if pat != strings.ToLower(pat) || strings.HasSuffix(pat, ".") || !isASCII(pat) {
			t.Fatalf("pattern %q normalized to %q", pattern, pat)
		}
		exact := strings.TrimPrefix(pat, "*.")
		if wild := exact != pat; !wild && !p.AllowsHost(exact) {
			t.Fatalf("%q does not match itself", pat)
		} else if wild && p.AllowsHost(exact) {
			t.Fatalf("%q matches its apex", pat)
		}
		h, err := NormalizeHost(host)
		if err != nil {
			return
		}
		again, err := NormalizeHost(h)
		if err != nil || again != h {
			t.Fatalf("NormalizeHost not idempotent: %q -> %q -> %q (%v)", host, h, again, err)
		}
		if !p.AllowsHost(h) {
			return
		}
		if pat == h {
			return
		}
		if !strings.HasPrefix(pat, "*.") || !strings.HasSuffix(h, pat[1:]) || len(h) <= len(pat)-1 {
			t.Fatalf("%q matched %q (from %q)", pat, h, host)
		}
		if strings.Contains(h, ":") || isIPv4Literal(h) {
			t.Fatalf("wildcard %q matched address %q", pat, h)
		}
	})
}

func isIPv4Literal(s string) bool {
	return strings.Trim(s, "0123456789.") == "" && strings.Count(s, ".") == 3
}
