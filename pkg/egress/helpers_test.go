package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every test talks to 127.0.0.1 only: this machine's network is watched.
// Names resolve through fakeResolver, and loopbackDial refuses (and fails
// the test on) any address that is not loopback, so a bug in the guard shows
// up as a test failure and never as traffic.

// fakeResolver answers from a table, or from answer if set, and counts calls.
type fakeResolver struct {
	mu     sync.Mutex
	table  map[string][]netip.Addr
	answer func(host string, call int) ([]netip.Addr, error)
	calls  map[string]int
}

func resolverOf(pairs ...string) *fakeResolver {
	r := &fakeResolver{table: map[string][]netip.Addr{}, calls: map[string]int{}}
	for i := 0; i+1 < len(pairs); i += 2 {
		for a := range strings.SplitSeq(pairs[i+1], ",") {
			r.table[pairs[i]] = append(r.table[pairs[i]], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[host]++
	if r.answer != nil {
		return r.answer(host, r.calls[host])
	}
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// dialRecorder dials loopback only and records what it was asked to dial.
type dialRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	addrs []string
}

func (d *dialRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		d.t.Errorf("proxy tried to dial %q, which is not loopback: refused, nothing sent", addr)
		return nil, fmt.Errorf("test refuses to dial %s", addr)
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func (d *dialRecorder) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// noDial fails the test if the proxy dials at all.
func noDial(t testing.TB) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		t.Errorf("proxy dialed %s %s although it should have refused first", network, addr)
		return nil, fmt.Errorf("test refuses to dial %s", addr)
	}
}

var quietLog = slog.New(slog.DiscardHandler)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// publicLoopback is a public policy that lets test upstreams on loopback
// through, as --egress-allow-cidr 127.0.0.0/8 would.
func publicLoopback() Policy { return Policy{Mode: Public, AllowCIDRs: loopback} }

// startProxy serves p on a fresh loopback port until the test ends.
func startProxy(t testing.TB, p *Proxy) string {
	t.Helper()
	if p.Dial == nil {
		p.Dial = (&dialRecorder{t: t}).dial
	}
	if p.Log == nil {
		p.Log = quietLog
	}
	return serveOn(t, func(ctx context.Context, ln net.Listener) error { return p.Serve(ctx, ln) })
}

// serveOn runs serve on a loopback listener and stops it at cleanup,
// checking that it returned cleanly.
func serveOn(t testing.TB, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveUntilCleanup(t, func(ctx context.Context) error { return serve(ctx, ln) })
	return ln.Addr().String()
}

// serveUntilCleanup runs serve until the test ends, then checks that it
// returned cleanly once its context ended.
func serveUntilCleanup(t testing.TB, serve func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not stop within 10s of its context ending")
		}
	})
}

// rawUpstream is a loopback server whose every connection is handled by h,
// for responses that net/http would refuse to send. It counts connections.
type rawUpstream struct {
	addr  string
	port  string
	conns atomic.Int32
}

func startRawUpstream(t testing.TB, h func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &rawUpstream{addr: ln.Addr().String()}
	_, u.port, _ = net.SplitHostPort(u.addr)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				h(c, bufio.NewReader(c))
			})
		}
	})
	return u
}

// readUpstreamRequest reads one request as an origin server would.
func readUpstreamRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(req.Body)
	return req, body, err
}

// roundTrip sends raw bytes to the proxy on a fresh connection and reads one
// response (for method, which decides whether a body follows).
func roundTrip(t testing.TB, proxy, raw, method string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	resp, body, err := readResponseOn(bufio.NewReader(c), method)
	require.NoError(t, err)
	return resp, body
}

func readResponseOn(br *bufio.Reader, method string) (*http.Response, string, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if method == "CONNECT" && resp.StatusCode == 200 {
		return resp, "", nil // a tunnel follows, not a body
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// okUpstream answers every request with 200 and "hello from upstream".
func okUpstream(t testing.TB) *rawUpstream {
	return startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, _, err := readUpstreamRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\nhello from upstream")
		}
	})
}
