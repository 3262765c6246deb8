package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// The egress client is this very program re-executed (runc's habit), so that
// all four sides of an egress row — direct, sandboxd, tinyproxy, squid — run
// the same code in a fresh process: in the substrate for three of them, and
// through `sandboxd exec` inside the sandbox for sandboxd's proxy, which is
// reachable only from there. It times itself, so process start and the join
// are not part of any figure, and prints one JSON document.

// clientResult is what one client run prints.
type clientResult struct {
	Bytes   int64   `json:"bytes,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	MiBps   float64 `json:"mibps,omitempty"`
	P50     float64 `json:"p50_ms,omitempty"`
	P99     float64 `json:"p99_ms,omitempty"`
	Count   int     `json:"count,omitempty"`
}

func runClient(args []string) int {
	fs := flag.NewFlagSet(clientRole, flag.ContinueOnError)
	mode := fs.String("mode", "", "connect | plain | small | tunnels | dns")
	proxy := fs.String("proxy", "", "proxy host:port; empty dials the target directly")
	target := fs.String("target", "", "host:port of the upstream")
	size := fs.Int64("bytes", 1<<30, "bytes to fetch (connect, plain)")
	count := fs.Int("n", 1000, "requests (small), questions (dns)")
	conc := fs.Int("c", 1, "concurrent tunnels (tunnels)")
	dur := fs.Duration("d", 5*time.Second, "duration (tunnels)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var res clientResult
	var err error
	switch *mode {
	case "connect":
		res, err = clientConnect(*proxy, *target, *size)
	case "plain":
		res, err = clientPlain(*proxy, *target, *size)
	case "small":
		res, err = clientSmall(*proxy, *target, *count)
	case "tunnels":
		res, err = clientTunnels(*proxy, *target, *conc, *dur)
	case "first":
		res, err = clientFirst(*proxy, *target, *count)
	case "dns":
		res, err = clientDNS(*target, *count)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "egress client:", err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// tunnel opens a byte stream to target: a TCP connection, through a CONNECT
// when a proxy is given. The reader holds whatever arrived with the reply.
func tunnel(proxy, target string) (net.Conn, *bufio.Reader, error) {
	addr := target
	if proxy != "" {
		addr = proxy
	}
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	if proxy == "" {
		return c, br, nil
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s via %s: %w", target, proxy, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s via %s: %s", target, proxy, resp.Status)
	}
	return c, br, nil
}

// clientConnect asks the stream upstream for size bytes through a tunnel.
func clientConnect(proxy, target string, size int64) (clientResult, error) {
	c, br, err := tunnel(proxy, target)
	if err != nil {
		return clientResult{}, err
	}
	defer c.Close()
	t0 := time.Now()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], uint64(size))
	if _, err := c.Write(req[:]); err != nil {
		return clientResult{}, err
	}
	n, err := drain(br, c, size)
	if err != nil {
		return clientResult{}, err
	}
	return throughput(n, time.Since(t0)), nil
}

// drain reads exactly size bytes: first what the buffered reader holds, then
// straight from the connection in 256 KiB reads.
func drain(br *bufio.Reader, c net.Conn, size int64) (int64, error) {
	var n int64
	if k := br.Buffered(); k > 0 {
		k = int(min(int64(k), size))
		br.Discard(k)
		n += int64(k)
	}
	buf := make([]byte, 256<<10)
	for n < size {
		k, err := c.Read(buf[:min(int64(len(buf)), size-n)])
		n += int64(k)
		if err != nil {
			if errors.Is(err, io.EOF) && n == size {
				break
			}
			return n, fmt.Errorf("after %d of %d bytes: %w", n, size, err)
		}
	}
	return n, nil
}

func throughput(n int64, d time.Duration) clientResult {
	return clientResult{Bytes: n, Seconds: d.Seconds(), MiBps: mibPerSec(n, d)}
}

// mibPerSec is the rate of n bytes in d, in MiB/s.
func mibPerSec(n int64, d time.Duration) float64 {
	return float64(n) / (1 << 20) / d.Seconds()
}

func httpClient(proxy string) *http.Client {
	tr := &http.Transport{
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		ReadBufferSize:      256 << 10,
		WriteBufferSize:     16 << 10,
	}
	if proxy != "" {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Minute}
}

// clientPlain fetches size bytes with a plain-HTTP GET (absolute-form through
// the proxy).
func clientPlain(proxy, target string, size int64) (clientResult, error) {
	hc := httpClient(proxy)
	t0 := time.Now()
	resp, err := hc.Get(fmt.Sprintf("http://%s/bytes/%d", target, size))
	if err != nil {
		return clientResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return clientResult{}, fmt.Errorf("GET: %s", resp.Status)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return clientResult{}, err
	}
	if n != size {
		return clientResult{}, fmt.Errorf("GET: %d bytes, want %d", n, size)
	}
	return throughput(n, time.Since(t0)), nil
}

// clientSmall sends count small GETs, one after another, on one keep-alive
// connection (to the proxy, or to the server), after 20 unmeasured ones.
func clientSmall(proxy, target string, count int) (clientResult, error) {
	hc := httpClient(proxy)
	u := fmt.Sprintf("http://%s/small", target)
	var lat samples
	for i := -20; i < count; i++ {
		t0 := time.Now()
		resp, err := hc.Get(u)
		if err != nil {
			return clientResult{}, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return clientResult{}, fmt.Errorf("GET /small: %v %v", resp.Status, err)
		}
		if i >= 0 {
			lat = append(lat, ms(time.Since(t0)))
		}
	}
	return clientResult{P50: lat.pct(50), P99: lat.pct(99), Count: len(lat)}, nil
}

// clientTunnels opens conc tunnels to the echo upstream and, once all are
// open, bounces 64 bytes through each in turn (closed loop) for dur.
func clientTunnels(proxy, target string, conc int, dur time.Duration) (clientResult, error) {
	type tun struct {
		c  net.Conn
		br *bufio.Reader
	}
	tuns := make([]tun, conc)
	for i := range tuns {
		c, br, err := tunnel(proxy, target)
		if err != nil {
			for _, t := range tuns[:i] {
				t.c.Close()
			}
			return clientResult{}, fmt.Errorf("tunnel %d: %w", i, err)
		}
		tuns[i] = tun{c, br}
	}
	defer func() {
		for _, t := range tuns {
			t.c.Close()
		}
	}()
	end := time.Now().Add(dur)
	all, err := inParallel(conc, func(i int) (samples, error) {
		t := tuns[i]
		msg := make([]byte, 64)
		back := make([]byte, 64)
		var lat samples
		for time.Now().Before(end) {
			t0 := time.Now()
			if _, err := t.c.Write(msg); err != nil {
				return nil, err
			}
			if _, err := io.ReadFull(t.br, back); err != nil {
				return nil, err
			}
			lat = append(lat, ms(time.Since(t0)))
		}
		return lat, nil
	})
	if err != nil {
		return clientResult{}, err
	}
	return clientResult{P50: all.pct(50), P99: all.pct(99), Count: len(all)}, nil
}
