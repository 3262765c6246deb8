package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hop-by-hop fields are dropped both ways, Transfer-Encoding included, and
// every field that Connection names
// (docs/failures.md#proxy-drops-hop-by-hop-headers).
func TestHopByHopHeadersDropped(t *testing.T) {
	got := make(chan http.Header, 1)
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, _, err := readUpstreamRequest(br)
		if err != nil {
			return
		}
		got <- req.Header
		io.WriteString(c, "HTTP/1.1 200 OK\r\n"+
			"Connection: X-Conn-Resp, keep-alive\r\nX-Conn-Resp: secret\r\nKeep-Alive: timeout=5\r\n"+
			"Proxy-Authenticate: Basic realm=up\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTrailer: X-T\r\n"+
			"X-Kept: yes\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n")
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})

	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://up.test:%s/x HTTP/1.1\r\nHost: up.test\r\n"+
		"Connection: X-Conn-Req, keep-alive\r\nX-Conn-Req: secret\r\nKeep-Alive: 300\r\nProxy-Connection: keep-alive\r\n"+
		"Proxy-Authorization: Basic Zm9vOmJhcg==\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nX-End-To-End: yes\r\n\r\n", up.port)
	br := bufio.NewReader(c)
	// Read the head by hand: net/http would hide which fields arrived.
	var head []string
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "\r\n" {
			break
		}
		head = append(head, strings.TrimRight(line, "\r\n"))
	}
	h := <-got
	for _, name := range []string{"Connection", "X-Conn-Req", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Upgrade"} {
		assert.Empty(t, h.Values(name), "request field %s reached the upstream", name)
	}
	assert.Equal(t, "yes", h.Get("X-End-To-End"))

	for _, name := range []string{"X-Conn-Resp", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection", "Upgrade", "Trailer"} {
		for _, line := range head {
			assert.False(t, strings.HasPrefix(strings.ToLower(line), strings.ToLower(name)+":"), "response field %s reached the client: %q", name, line)
		}
	}
	assert.Contains(t, head, "X-Kept: yes")
	// The body was de-chunked and is re-chunked by the proxy itself: exactly
	// one Transfer-Encoding, ours, and it decodes.
	assert.Contains(t, head, "Transfer-Encoding: chunked")
	body, err := io.ReadAll(httputil.NewChunkedReader(br))
	require.NoError(t, err)
	assert.Equal(t, "hello world", string(body))
}

// Request bodies are de-chunked and re-framed, ambiguous framing is a 400,
// and the request target wins over Host
// (docs/failures.md#request-framing-is-redone-and-host-is-not-trusted).
func TestRequestBodiesReframedAndTargetWinsOverHost(t *testing.T) {
	type seen struct {
		host, te string
		cl       int64
		body     string
	}
	got := make(chan seen, 1)
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, body, err := readUpstreamRequest(br)
			if err != nil {
				return
			}
			got <- seen{host: req.Host, te: strings.Join(req.TransferEncoding, ","), cl: req.ContentLength, body: string(body)}
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		}
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	target := "http://up.test:" + up.port + "/post"

	tests := []struct {
		name       string
		head, body string
		wantStatus int
		want       seen
	}{
		{name: "chunked in, body arrives whole", head: "Transfer-Encoding: chunked\r\n",
			body: "3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nX-Trailer: dropped\r\n\r\n", wantStatus: 204,
			want: seen{te: "chunked", cl: -1, body: "abcdefg"}},
		{name: "content-length in", head: "Content-Length: 5\r\n", body: "hello", wantStatus: 204,
			want: seen{cl: 5, body: "hello"}},
		{name: "equal duplicate content-length", head: "Content-Length: 5\r\nContent-Length: 5\r\n", body: "hello", wantStatus: 204,
			want: seen{cl: 5, body: "hello"}},
		{name: "CL and TE", head: "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", body: "3\r\nabc\r\n0\r\n\r\n", wantStatus: 400},
		{name: "differing content-length", head: "Content-Length: 5\r\nContent-Length: 6\r\n", body: "hello!", wantStatus: 400},
		{name: "content-length list that differs", head: "Content-Length: 5, 6\r\n", body: "hello!", wantStatus: 400},
		{name: "signed content-length", head: "Content-Length: +5\r\n", body: "hello", wantStatus: 400},
		{name: "TE chunked, identity", head: "Transfer-Encoding: chunked, identity\r\n", body: "0\r\n\r\n", wantStatus: 501},
		{name: "TE gzip", head: "Transfer-Encoding: gzip\r\n", body: "", wantStatus: 501},
		{name: "TE with space before colon", head: "Transfer-Encoding : chunked\r\n", body: "0\r\n\r\n", wantStatus: 400},
		{name: "bad chunk size", head: "Transfer-Encoding: chunked\r\n", body: "-1\r\nabc\r\n0\r\n\r\n", wantStatus: 400},
		{name: "huge chunk size", head: "Transfer-Encoding: chunked\r\n", body: "fffffffffffffffff\r\nabc\r\n0\r\n\r\n", wantStatus: 400},
		{name: "chunk longer than its size", head: "Transfer-Encoding: chunked\r\n", body: "2\r\nabc\r\n0\r\n\r\n", wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := "POST " + target + " HTTP/1.1\r\nHost: evil.example\r\n" + tt.head + "\r\n" + tt.body
			resp, _ := roundTrip(t, proxy, raw, "POST")
			require.Equal(t, tt.wantStatus, resp.StatusCode)
			if tt.wantStatus >= 400 {
				if tt.wantStatus == 400 {
					assert.Equal(t, "bad-request", resp.Header.Get("X-Proxy-Error"))
				}
				select {
				case s := <-got:
					// A body error found while streaming may reach the
					// upstream truncated, but never as a complete request.
					t.Logf("upstream saw %+v", s)
				default:
				}
				return
			}
			s := <-got
			tt.want.host = "up.test:" + up.port // the target's authority, never the Host field
			assert.Equal(t, tt.want, s)
		})
	}
}

// A response that breaks the header grammar is a 502 before anything of it
// reaches the client (docs/failures.md#malformed-headers-never-pass).
func TestInvalidUpstreamHeaderIs502(t *testing.T) {
	tests := []struct{ name, response string }{
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n X-Injected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"space before colon", "HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 0\r\n\r\n"},
		{"NUL in value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n"},
		{"bare CR in value", "HTTP/1.1 200 OK\r\nX-A: a\rX-Injected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"bare LF line end", "HTTP/1.1 200 OK\nX-A: a\nContent-Length: 0\n\n"},
		{"non-token name", "HTTP/1.1 200 OK\r\nX(A): a\r\nContent-Length: 0\r\n\r\n"},
		{"CL and TE", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"differing CL", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
		{"bad status", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n"},
		{"not HTTP", "SSH-2.0-OpenSSH_9.2\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				if _, _, err := readUpstreamRequest(br); err == nil {
					io.WriteString(c, tt.response)
				}
			})
			proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
			resp, body := roundTrip(t, proxy, "GET http://up.test:"+up.port+"/ HTTP/1.1\r\nHost: up.test\r\n\r\n", "GET")
			assert.Equal(t, 502, resp.StatusCode)
			assert.Equal(t, "bad-upstream-response", resp.Header.Get("X-Proxy-Error"))
			assert.Empty(t, resp.Header.Get("X-A"))
			assert.Empty(t, resp.Header.Get("X-Injected"))
			assert.NotContains(t, body, "Injected")
		})
	}
}

// A malformed request is a 400 and nothing reaches any upstream: the request
// side of docs/failures.md#malformed-headers-never-pass.
func TestRequestGrammarIs400(t *testing.T) {
	proxy := startProxy(t, &Proxy{Policy: Policy{Mode: Public}, Resolver: resolverOf(), Dial: noDial(t)})
	tests := []struct{ name, raw string }{
		{"obs-fold", "GET http://a.example/ HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n"},
		{"space before colon", "GET http://a.example/ HTTP/1.1\r\nHost : a.example\r\n\r\n"},
		{"NUL in value", "GET http://a.example/ HTTP/1.1\r\nX-A: a\x00\r\n\r\n"},
		{"bare LF", "GET http://a.example/ HTTP/1.1\nHost: a.example\n\n"},
		{"bare CR", "GET http://a.example/ HTTP/1.1\r\nX-A: a\rb\r\n\r\n"},
		{"two Host fields", "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"},
		{"origin form", "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"},
		{"https absolute form", "GET https://a.example/ HTTP/1.1\r\n\r\n"},
		{"userinfo", "GET http://a.example@b.example/ HTTP/1.1\r\n\r\n"},
		{"double space", "GET  http://a.example/ HTTP/1.1\r\n\r\n"},
		{"lower-case version", "GET http://a.example/ http/1.1\r\n\r\n"},
		{"CONNECT without port", "CONNECT a.example HTTP/1.1\r\n\r\n"},
		{"CONNECT with body", "CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"},
		{"port zero", "GET http://a.example:0/ HTTP/1.1\r\n\r\n"},
		{"port too large", "GET http://a.example:65536/ HTTP/1.1\r\n\r\n"},
		{"TE in HTTP/1.0", "POST http://a.example/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"line too long", "GET http://a.example/" + strings.Repeat("a", http1.BufSize) + " HTTP/1.1\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _ := roundTrip(t, proxy, tt.raw, "GET")
			assert.Equal(t, 400, resp.StatusCode)
			assert.True(t, resp.Close, "a refused request ends its connection")
		})
	}
	resp, _ := roundTrip(t, proxy, "GET http://a.example/ HTTP/2.0\r\n\r\n", "GET")
	assert.Equal(t, 505, resp.StatusCode)
}

// At the proxy, whatever a name resolves to is checked before any dial, under
// public too, and names in AllowCIDRs' ranges need that flag
// (docs/failures.md#non-global-destinations-refused-even-under-public).
func TestProxyRefusesNonGlobalWithoutDialing(t *testing.T) {
	res := resolverOf(
		"metadata.test", "169.254.169.254",
		"private.test", "10.0.0.1,192.168.1.1",
		"mirror.test", "203.0.113.10", // where this machine's Debian mirrors resolve: documentation range
		"mapped.test", "::ffff:169.254.169.254",
		"nat64.test", "64:ff9b::a9fe:a9fe",
		"loop.test", "127.0.0.1",
	)
	proxy := startProxy(t, &Proxy{Policy: Policy{Mode: Public}, Resolver: res, Dial: noDial(t)})
	targets := []string{"metadata.test", "private.test", "mirror.test", "mapped.test", "nat64.test", "loop.test",
		"169.254.169.254", "127.0.0.1", "[::1]", "[fd00::1]", "0.0.0.0"}
	for _, host := range targets {
		t.Run(host, func(t *testing.T) {
			resp, body := roundTrip(t, proxy, "GET http://"+host+"/latest/meta-data/ HTTP/1.1\r\n\r\n", "GET")
			assert.Equal(t, 403, resp.StatusCode)
			assert.Equal(t, "blocked-by-address", resp.Header.Get("X-Proxy-Error"))
			assert.Contains(t, body, "not reachable from the sandbox")
			if !strings.Contains(host, "169.254") {
				assert.NotContains(t, body, "169.254", "the body names the request's host, not its addresses")
			}
			resp, _ = roundTrip(t, proxy, "CONNECT "+host+":443 HTTP/1.1\r\n\r\n", "CONNECT")
			assert.Equal(t, 403, resp.StatusCode)
			assert.Equal(t, "blocked-by-address", resp.Header.Get("X-Proxy-Error"))
		})
	}
}

// Only the addresses that passed are dialed: a name with one private and one
// allowed address goes to the allowed one.
func TestOnlyCheckedAddressesDialed(t *testing.T) {
	up := okUpstream(t)
	d := &dialRecorder{t: t}
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Dial: d.dial,
		Resolver: resolverOf("mixed.test", "169.254.169.254,10.1.1.1,127.0.0.1")})
	resp, body := roundTrip(t, proxy, "GET http://mixed.test:"+up.port+"/ HTTP/1.1\r\n\r\n", "GET")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "hello from upstream", body)
	assert.Equal(t, []string{"127.0.0.1:" + up.port}, d.dialed())
}

// DNS rebinding: the name is resolved once per decision and the checked
// address is what gets dialed; an answer that changes to a forbidden address
// is refused without a dial.
func TestDNSRebindingResolvesOnceDialsChecked(t *testing.T) {
	up := okUpstream(t)
	res := &fakeResolver{answer: func(host string, call int) ([]netip.Addr, error) {
		if call == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}}
	d := &dialRecorder{t: t}
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: res, Dial: d.dial})

	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	for range 3 { // keep-alive: later requests reuse the checked connection
		fmt.Fprintf(c, "GET http://rebind.test:%s/ HTTP/1.1\r\n\r\n", up.port)
		resp, body, err := readResponseOn(br, "GET")
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "hello from upstream", body)
	}
	assert.Equal(t, 1, res.count("rebind.test"))
	assert.Equal(t, []string{"127.0.0.1:" + up.port}, d.dialed())

	resp, _ := roundTrip(t, proxy, "CONNECT rebind.test:"+up.port+" HTTP/1.1\r\n\r\n", "CONNECT")
	assert.Equal(t, 403, resp.StatusCode)
	assert.Equal(t, "blocked-by-address", resp.Header.Get("X-Proxy-Error"))
	assert.Equal(t, 2, res.count("rebind.test"))
	assert.Len(t, d.dialed(), 1)
}

// An upstream failure before the response is a 502, never a silently closed
// connection (docs/failures.md#upstream-failure-is-a-502).
func TestUpstreamFailureIs502(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	hangup := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) { readUpstreamRequest(br) })
	half := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		readUpstreamRequest(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-")
	})
	res := resolverOf("up.test", "127.0.0.1")
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: res})
	tests := []struct {
		name, raw, method, tag string
	}{
		{"connection refused", fmt.Sprintf("GET http://up.test:%d/ HTTP/1.1\r\n\r\n", closedPort), "GET", "connect-failed"},
		{"CONNECT refused", fmt.Sprintf("CONNECT up.test:%d HTTP/1.1\r\n\r\n", closedPort), "CONNECT", "connect-failed"},
		{"no such host", "GET http://nxdomain.test/ HTTP/1.1\r\n\r\n", "GET", "dns-failed"},
		{"CONNECT no such host", "CONNECT nxdomain.test:443 HTTP/1.1\r\n\r\n", "CONNECT", "dns-failed"},
		{"closed without response", "GET http://up.test:" + hangup.port + "/ HTTP/1.1\r\n\r\n", "GET", "upstream-failed"},
		{"closed mid-head", "GET http://up.test:" + half.port + "/ HTTP/1.1\r\n\r\n", "GET", "upstream-failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := roundTrip(t, proxy, tt.raw, tt.method)
			assert.Equal(t, 502, resp.StatusCode)
			assert.Equal(t, tt.tag, resp.Header.Get("X-Proxy-Error"))
			assert.NotEmpty(t, body)
		})
	}
}

// DNS and dial timeouts turn into 502s in bounded time.
func TestTimeoutsAre502(t *testing.T) {
	slow := &fakeResolver{answer: func(host string, call int) ([]netip.Addr, error) {
		time.Sleep(2 * time.Second)
		return nil, context.DeadlineExceeded
	}}
	stuckDial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	for _, tt := range []struct {
		name string
		p    *Proxy
		tag  string
	}{
		{"dns", &Proxy{Policy: publicLoopback(), Resolver: slow, DNSTimeout: 100 * time.Millisecond, Dial: noDial(t)}, "dns-failed"},
		{"dial", &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1"), DialTimeout: 100 * time.Millisecond, Dial: stuckDial}, "connect-failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy := startProxy(t, tt.p)
			start := time.Now()
			resp, _ := roundTrip(t, proxy, "GET http://up.test:9/ HTTP/1.1\r\n\r\n", "GET")
			assert.Equal(t, 502, resp.StatusCode)
			assert.Equal(t, tt.tag, resp.Header.Get("X-Proxy-Error"))
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

// Plain-HTTP requests are filtered by the allowlist, not only CONNECT
// (docs/failures.md#plain-http-filtered-like-connect).
func TestPlainHTTPFilteredLikeConnect(t *testing.T) {
	up := okUpstream(t)
	pol, err := ParsePolicy("allowlist", []string{"allowed.test", "*.wild.test"}, []string{"127.0.0.0/8"})
	require.NoError(t, err)
	res := resolverOf("allowed.test", "127.0.0.1", "denied.test", "127.0.0.1", "a.wild.test", "127.0.0.1", "wild.test", "127.0.0.1")
	d := &dialRecorder{t: t}
	proxy := startProxy(t, &Proxy{Policy: pol, Resolver: res, Dial: d.dial})
	tests := []struct {
		host   string
		status int
	}{
		{"allowed.test", 200},
		{"ALLOWED.TEST.", 200},
		{"a.wild.test", 200},
		{"denied.test", 403},
		{"wild.test", 403},
		{"127.0.0.1", 403}, // an address literal is not on the list either
		{"allowed.test.denied.test", 403},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			for _, method := range []string{"GET", "CONNECT"} {
				raw := "GET http://" + tt.host + ":" + up.port + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
				if method == "CONNECT" {
					raw = "CONNECT " + tt.host + ":" + up.port + " HTTP/1.1\r\n\r\n"
				}
				resp, body := roundTrip(t, proxy, raw, method)
				assert.Equal(t, tt.status, resp.StatusCode, method)
				if tt.status == 403 {
					assert.Equal(t, "blocked-by-allowlist", resp.Header.Get("X-Proxy-Error"))
					assert.Contains(t, body, "not on this sandbox's allowlist")
				}
			}
		})
	}
	assert.Equal(t, 0, res.count("denied.test"), "a name the allowlist refuses is not even resolved")
}

// The same loopback names that tests reach with AllowCIDRs are refused
// without it.
func TestLoopbackUpstreamNeedsAllowCIDR(t *testing.T) {
	up := okUpstream(t)
	proxy := startProxy(t, &Proxy{Policy: Policy{Mode: Public}, Resolver: resolverOf("up.test", "127.0.0.1"), Dial: noDial(t)})
	resp, _ := roundTrip(t, proxy, "GET http://up.test:"+up.port+"/ HTTP/1.1\r\n\r\n", "GET")
	assert.Equal(t, 403, resp.StatusCode)
	assert.Equal(t, "blocked-by-address", resp.Header.Get("X-Proxy-Error"))
}

// Chunked bodies both ways through one keep-alive connection, with an
// HTTP/1.0 client getting a close-delimited body instead.
func TestChunkedBodiesBothWays(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Request-TE", strings.Join(r.TransferEncoding, ","))
		for i := range 3 { // flushes force a chunked response
			fmt.Fprintf(w, "%d:%s;", i, b)
			w.(http.Flusher).Flush()
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})

	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	for range 2 {
		fmt.Fprintf(c, "POST http://up.test:%s/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n", port)
		resp, body, err := readResponseOn(br, "POST")
		require.NoError(t, err)
		assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		assert.Equal(t, "chunked", resp.Header.Get("X-Request-TE"))
		assert.Equal(t, "0:abc;1:abc;2:abc;", body)
		assert.False(t, resp.Close)
	}

	resp, body := roundTrip(t, proxy, "GET http://up.test:"+port+"/ HTTP/1.0\r\n\r\n", "GET")
	assert.Empty(t, resp.TransferEncoding)
	assert.True(t, resp.Close)
	assert.Equal(t, "0:;1:;2:;", body)
}

// HEAD, 204 and 304 carry no body whatever their fields say, and the
// connection stays usable after each.
func TestBodylessResponsesFramed(t *testing.T) {
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, _, err := readUpstreamRequest(br)
			if err != nil {
				return
			}
			switch req.URL.Path {
			case "/head":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
			case "/204":
				io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			case "/304":
				io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\n\r\n")
			case "/continue":
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, tt := range []struct {
		method, path string
		status       int
		cl           int64
	}{
		{"HEAD", "/head", 200, 1000},
		{"GET", "/204", 204, 0},
		{"GET", "/304", 304, 1000},
		{"GET", "/continue", 200, 2},
		{"HEAD", "/head", 200, 1000},
	} {
		fmt.Fprintf(c, "%s http://up.test:%s%s HTTP/1.1\r\n\r\n", tt.method, up.port, tt.path)
		resp, err := http.ReadResponse(br, &http.Request{Method: tt.method})
		require.NoError(t, err, tt.path)
		for resp.StatusCode < 200 {
			resp, err = http.ReadResponse(br, &http.Request{Method: tt.method})
			require.NoError(t, err)
		}
		assert.Equal(t, tt.status, resp.StatusCode, tt.path)
		if tt.status != 204 {
			assert.Equal(t, fmt.Sprint(tt.cl), resp.Header.Get("Content-Length"), tt.path)
		}
		if tt.method == "GET" {
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, int(tt.cl)*boolInt(tt.status == 200), len(b))
		}
	}
	assert.Equal(t, int32(1), up.conns.Load(), "one upstream connection carried all requests")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Keep-alive goes on per client connection and a new host gets a new
// upstream connection; an upstream that closed between requests is redialed.
func TestKeepAliveAndRedial(t *testing.T) {
	oneShot := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, _, err := readUpstreamRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/1" { // says so, which must not end the client's connection
			io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") // then closes without saying so
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 4 {
		fmt.Fprintf(c, "GET http://up.test:%s/%d HTTP/1.1\r\n\r\n", oneShot.port, i)
		resp, body, err := readResponseOn(br, "GET")
		require.NoError(t, err, "request %d", i)
		assert.Equal(t, "ok", body)
		assert.False(t, resp.Close)
		time.Sleep(20 * time.Millisecond) // let the upstream's close arrive
	}
	assert.Equal(t, int32(4), oneShot.conns.Load())
}

// Upgrade: websocket is spliced after the 101; other upgrades are not
// forwarded.
func TestWebSocketUpgradeSpliced(t *testing.T) {
	got := make(chan http.Header, 1)
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, _, err := readUpstreamRequest(br)
		if err != nil {
			return
		}
		got <- req.Header
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\r\n")
		io.Copy(c, br) // echo until the client half-closes
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("ws.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://ws.test:%s/chat HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\nSec-WebSocket-Version: 13\r\n\r\n", up.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	require.NoError(t, err)
	assert.Equal(t, 101, resp.StatusCode)
	assert.Equal(t, "websocket", resp.Header.Get("Upgrade"))
	assert.Equal(t, "x", resp.Header.Get("Sec-WebSocket-Accept"))
	h := <-got
	assert.Equal(t, "websocket", h.Get("Upgrade"))
	assert.Equal(t, "Upgrade", h.Get("Connection"))
	assert.Equal(t, "k", h.Get("Sec-WebSocket-Key"))

	io.WriteString(c, "frame-bytes")
	c.(*net.TCPConn).CloseWrite()
	echo, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "frame-bytes", string(echo))
}

// MaxConns bounds concurrent connections: granted ones are never evicted
// and the one over the bound is told so, while a connection that has not
// been granted anything yet makes room for a newer one.
func TestConnectionLimit(t *testing.T) {
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1"), MaxConns: 1})

	idle, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer idle.Close()
	time.Sleep(50 * time.Millisecond) // let it be admitted
	tunnel, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer tunnel.Close()
	tunnel.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tunnel, "CONNECT up.test:%s HTTP/1.1\r\n\r\n", up.port)
	resp, _, err := readResponseOn(bufio.NewReader(tunnel), "CONNECT")
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "the ungranted connection made room")
	idle.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = idle.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the oldest ungranted connection was evicted")

	resp, _ = roundTrip(t, proxy, "GET http://up.test/ HTTP/1.1\r\n\r\n", "GET")
	assert.Equal(t, 503, resp.StatusCode, "a granted tunnel is never evicted")
	assert.Equal(t, "too-many-connections", resp.Header.Get("X-Proxy-Error"))
}

// The agent's background processes are alive while the verifier runs and can
// open the visitor port, though not use it. A flood of such idle connections
// must not lock the verifier out
// (docs/failures.md#visitor-port-held-and-token-guarded,
// docs/failures.md#verifier-sees-agent-servers).
func TestIdleFloodCannotLockOutVisitor(t *testing.T) {
	up := okUpstream(t)
	v := &Visitor{Proxy: Proxy{Resolver: resolverOf("up.test", "127.0.0.1"), Log: quietLog, MaxConns: 8, Dial: (&dialRecorder{t: t}).dial}}
	addr := serveOn(t, v.Serve)
	token, done := v.Open(publicLoopback())
	defer done()
	for range 50 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	resp, body := roundTrip(t, addr, "GET http://up.test:"+up.port+"/ HTTP/1.1\r\n"+basic(token)+"\r\n", "GET")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "hello from upstream", body)
}

// A connection must deliver its first request head within HeaderTimeout,
// however it trickles bytes to look busy.
func TestHeaderTimeout(t *testing.T) {
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf(), HeaderTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	io.WriteString(c, "GET http://up.test/ HTTP/1.1\r\n")
	for range 20 {
		if _, err := io.WriteString(c, "X: y\r\n"); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)
}

// An idle client connection is closed after the idle timeout.
func TestIdleClientClosed(t *testing.T) {
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf(), IdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// The listener exists before anyone serves it, so a client that connects
// first waits in the backlog and is answered, never refused
// (docs/failures.md#listeners-ready-before-the-first-session).
func TestConnectionBeforeServeIsAnswered(t *testing.T) {
	up := okUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err, "the first connection is not refused")
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://up.test:%s/ HTTP/1.1\r\n\r\n", up.port)

	p := &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1"), Log: quietLog, Dial: (&dialRecorder{t: t}).dial}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	resp, body, err := readResponseOn(bufio.NewReader(c), "GET")
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "hello from upstream", body)
}

// A client that sends Expect: 100-continue gets the upstream's 100 and only
// then sends its body: the body goes up while the response is awaited.
func TestExpectContinue(t *testing.T) {
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil || req.Header.Get("Expect") != "100-continue" {
			io.WriteString(c, "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n")
			return
		}
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		b, _ := io.ReadAll(req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "PUT http://up.test:%s/ HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", up.port)
	br := bufio.NewReader(c)
	interim, err := http.ReadResponse(br, &http.Request{Method: "PUT"})
	require.NoError(t, err)
	require.Equal(t, 100, interim.StatusCode, "the 100 arrives before the body is sent")
	io.WriteString(c, "hello")
	resp, body, err := readResponseOn(br, "PUT")
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "hello", body)
}

// An upstream that answers before reading the body (a 413 for an upload too
// large) has its answer delivered, and the connection then ends.
func TestEarlyResponseDelivered(t *testing.T) {
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big\n")
		}
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST http://up.test:%s/ HTTP/1.1\r\nContent-Length: 100000000\r\n\r\nsome of it", up.port)
	resp, body, err := readResponseOn(bufio.NewReader(c), "POST")
	require.NoError(t, err)
	assert.Equal(t, 413, resp.StatusCode)
	assert.Equal(t, "too big\n", body)
}

// A body of known length, which the proxy splices between the two
// connections: every byte arrives, a keep-alive request follows on the same
// connection, and an upstream that ends short of its Content-Length ends the
// client's connection short too, never with a response that looks complete
// (docs/failures.md#proxy-drops-hop-by-hop-headers,
// docs/failures.md#upstream-failure-is-a-502).
func TestSplicedBodyExactOrCutShort(t *testing.T) {
	const size = 3<<20 + 17
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/short" {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
				c.Write(body[:size/3])
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
			c.Write(body)
		}
	})
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c, "GET http://up.test:%s/full HTTP/1.1\r\nHost: up.test\r\n\r\n", up.port)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(body, got), "request %d: %d bytes, intact: %v", i, len(got), bytes.Equal(body, got))
	}

	fmt.Fprintf(c, "GET http://up.test:%s/short HTTP/1.1\r\nHost: up.test\r\n\r\n", up.port)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "a body cut short is never a complete response")
	assert.Less(t, len(got), size)
}
