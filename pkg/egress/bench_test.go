package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The benchmarks measure the proxy against a direct loopback connection in
// the same run, alternating the two so that both see the same machine load,
// and report both figures and their ratio (proxy/direct throughput, or
// proxy/direct latency).

const benchChunk = 1 << 20

// streamServer writes zeros to every connection until it is closed.
func streamServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		buf := make([]byte, 256<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func BenchmarkConnectThroughput(b *testing.B) {
	target := streamServer(b)
	_, port, _ := net.SplitHostPort(target)
	proxy := startProxy(b, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})

	direct, err := net.Dial("tcp", target)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	tunnel, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	defer tunnel.Close()
	fmt.Fprintf(tunnel, "CONNECT up.test:%s HTTP/1.1\r\n\r\n", port)
	br := bufio.NewReaderSize(tunnel, 64<<10)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	var dDirect, dProxy time.Duration
	b.SetBytes(2 * benchChunk)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := io.CopyN(io.Discard, direct, benchChunk); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := io.CopyN(io.Discard, br, benchChunk); err != nil {
			b.Fatal(err)
		}
		dDirect += t1.Sub(t0)
		dProxy += time.Since(t1)
	}
	mb := float64(b.N) * benchChunk / 1e6
	b.ReportMetric(mb/dDirect.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/dProxy.Seconds(), "proxy-MB/s")
	b.ReportMetric(dDirect.Seconds()/dProxy.Seconds(), "ratio")
}

func BenchmarkPlainHTTPThroughput(b *testing.B) {
	body := make([]byte, 8<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	proxy := startProxy(b, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	directClient, proxyClient := benchClients(proxy)
	var dDirect, dProxy time.Duration
	b.SetBytes(2 * int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		benchGet(b, directClient, srv.URL+"/big")
		t1 := time.Now()
		benchGet(b, proxyClient, "http://up.test:"+port+"/big")
		dDirect += t1.Sub(t0)
		dProxy += time.Since(t1)
	}
	mb := float64(b.N) * float64(len(body)) / 1e6
	b.ReportMetric(mb/dDirect.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/dProxy.Seconds(), "proxy-MB/s")
	b.ReportMetric(dDirect.Seconds()/dProxy.Seconds(), "ratio")
}

func BenchmarkSmallRequestLatency(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	proxy := startProxy(b, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	directClient, proxyClient := benchClients(proxy)
	var lDirect, lProxy []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		benchGet(b, directClient, srv.URL+"/")
		t1 := time.Now()
		benchGet(b, proxyClient, "http://up.test:"+port+"/")
		lDirect = append(lDirect, t1.Sub(t0))
		lProxy = append(lProxy, time.Since(t1))
	}
	pd50, pd99 := percentiles(lDirect)
	pp50, pp99 := percentiles(lProxy)
	b.ReportMetric(float64(pd50.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(pd99.Microseconds()), "direct-p99-µs")
	b.ReportMetric(float64(pp50.Microseconds()), "proxy-p50-µs")
	b.ReportMetric(float64(pp99.Microseconds()), "proxy-p99-µs")
	b.ReportMetric(float64(pp50)/float64(pd50), "p50-ratio")
}

func benchClients(proxy string) (direct, viaProxy *http.Client) {
	u, _ := url.Parse("http://" + proxy)
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}},
		&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 4}}
}

func benchGet(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}
