package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// halfCloseServer reads its whole input, then (only after EOF) answers with
// a reply derived from it and closes: a peer that closing both directions
// on the first EOF would cut off.
func halfCloseServer(t *testing.T) *rawUpstream {
	return startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		in, err := io.ReadAll(br)
		if err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // the reply comes well after the client's EOF
		fmt.Fprintf(c, "got %d bytes: %s", len(in), bytes.ToUpper(in))
	})
}

// Each direction closes on its own EOF; the reply that follows the client's
// half-close still arrives, through a CONNECT tunnel and through a peer
// (docs/failures.md#relays-close-each-direction-on-its-own).
func TestRelaysHalfCloseEachDirection(t *testing.T) {
	srv := halfCloseServer(t)
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	peer := serveOn(t, func(ctx context.Context, ln net.Listener) error {
		return ServePeer(ctx, ln, netip.MustParseAddrPort(srv.addr), nil)
	})
	for _, via := range []string{"connect", "peer"} {
		t.Run(via, func(t *testing.T) {
			addr := peer
			if via == "connect" {
				addr = proxy
			}
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(c)
			if via == "connect" {
				fmt.Fprintf(c, "CONNECT up.test:%s HTTP/1.1\r\n\r\n", srv.port)
				resp, _, err := readResponseOn(br, "CONNECT")
				require.NoError(t, err)
				require.Equal(t, 200, resp.StatusCode)
			}
			io.WriteString(c, "hello, half-closed world")
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			reply, err := io.ReadAll(br)
			require.NoError(t, err)
			assert.Equal(t, "got 24 bytes: HELLO, HALF-CLOSED WORLD", string(reply))
		})
	}
}

// Bytes sent right behind the CONNECT line (before the 200) are not lost.
func TestConnectPipelinedBytesKept(t *testing.T) {
	srv := halfCloseServer(t)
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1")})
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT up.test:%s HTTP/1.1\r\n\r\nearly", srv.port)
	c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	resp, _, err := readResponseOn(br, "CONNECT")
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	reply, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "got 5 bytes: EARLY", string(reply))
}

// A tunnel with no traffic either way is closed after the idle timeout, but
// one that streams in one direction only stays open.
func TestTunnelIdleTimeout(t *testing.T) {
	// Generous times: this machine's two cores are shared with other builds,
	// and a relay starved for longer than the idle time sees no traffic
	// (make test runs every package at once).
	const idle = 3 * time.Second
	streamer := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for range 60 { // 6 s of output, much longer than idle
			if _, err := io.WriteString(c, "tick\n"); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	silent := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	proxy := startProxy(t, &Proxy{Policy: publicLoopback(), Resolver: resolverOf("up.test", "127.0.0.1"), IdleTimeout: idle})
	open := func(port string) (*bufio.Reader, net.Conn) {
		c, err := net.Dial("tcp", proxy)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "CONNECT up.test:%s HTTP/1.1\r\n\r\n", port)
		br := bufio.NewReader(c)
		resp, _, err := readResponseOn(br, "CONNECT")
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		return br, c
	}

	br, _ := open(streamer.port)
	out, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("tick\n", 60), string(out), "a one-way stream is not idle")

	br, _ = open(silent.port)
	start := time.Now()
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF)
	assert.Less(t, time.Since(start), 5*idle)
	assert.GreaterOrEqual(t, time.Since(start), idle)
}

// A peer whose target is down closes the connection instead of hanging.
func TestPeerTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	peer := serveOn(t, func(ctx context.Context, ln net.Listener) error { return ServePeer(ctx, ln, target, nil) })
	c, err := net.Dial("tcp", peer)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
}
