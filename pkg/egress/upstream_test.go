package egress

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// The upstream proxy comes from the substrate's variables, upper case
// first, with NO_PROXY's names reached directly.
func TestUpstreamFromEnv(t *testing.T) {
	u, err := UpstreamFromEnv(envOf())
	require.NoError(t, err)
	assert.Nil(t, u, "no variable, no upstream")
	assert.Nil(t, u.For("a.example", 443), "a nil upstream applies to nothing")

	u, err = UpstreamFromEnv(envOf("https_proxy", "proxy.corp:3128", "NO_PROXY", "internal.corp,.svc"))
	require.NoError(t, err)
	require.NotNil(t, u)
	assert.Equal(t, "proxy.corp:3128", u.For("a.example", 443).Host)
	assert.Nil(t, u.For("internal.corp", 443), "NO_PROXY names are reached directly")
	assert.Nil(t, u.For("db.svc", 5432), "NO_PROXY domains too")
	assert.Nil(t, u.For("a.example", 80), "no HTTP_PROXY: port 80 is reached directly")

	u, err = UpstreamFromEnv(envOf("HTTPS_PROXY", "http://user:secret@proxy.corp:3128", "https_proxy", "http://other:1"))
	require.NoError(t, err)
	assert.Equal(t, "proxy.corp:3128", u.For("a.example", 8443).Host, "upper case wins")
	assert.NotContains(t, u.Describe().HTTPSProxy, "secret", "status never shows the password")

	_, err = UpstreamFromEnv(envOf("HTTPS_PROXY", "socks5://proxy.corp:1080"))
	require.ErrorContains(t, err, "http://")
}

// Behind a company proxy, the egress reaches an allowed name through it
// with CONNECT name:port: the name is resolved by the upstream proxy, never
// by the daemon. A name the policy refuses never reaches the upstream, and
// a NO_PROXY name is dialled directly.
func TestUpstreamProxyCarriesAllowedNames(t *testing.T) {
	up := okUpstream(t)
	proxyAddr, logPath := sandboxtest.StartTinyproxy(t, "127.0.0.1", map[string]string{"only-upstream.test": "127.0.0.1"})
	u, err := UpstreamFromEnv(envOf("HTTPS_PROXY", "http://"+proxyAddr, "HTTP_PROXY", "http://"+proxyAddr, "NO_PROXY", "direct.test"))
	require.NoError(t, err)

	resolver := resolverOf("direct.test", "127.0.0.1")
	p := &Proxy{Policy: Policy{Mode: Allowlist, AllowedHosts: []string{"only-upstream.test", "direct.test"}, AllowCIDRs: loopback},
		Resolver: resolver, Upstream: u}
	proxy := startProxy(t, p)

	// An allowed name the daemon cannot resolve: carried by the upstream.
	c, err := net.Dial("tcp", proxy)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT only-upstream.test:%s HTTP/1.1\r\nHost: only-upstream.test:%s\r\n\r\n", up.port, up.port)
	br := bufio.NewReader(c)
	resp, _, err := readResponseOn(br, "CONNECT")
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: only-upstream.test\r\n\r\n")
	resp, body, err := readResponseOn(br, "GET")
	require.NoError(t, err)
	assert.Equal(t, "hello from upstream", body)
	assert.Equal(t, 0, resolver.count("only-upstream.test"), "the daemon never resolved the name")

	// A name the allowlist refuses: 403 from us, nothing at the upstream.
	before := readFile(t, logPath)
	resp, _ = roundTrip(t, proxy, "CONNECT refused.test:"+up.port+" HTTP/1.1\r\n\r\n", "CONNECT")
	assert.Equal(t, 403, resp.StatusCode)
	assert.Equal(t, strings.Count(before, "CONNECT"), strings.Count(readFile(t, logPath), "CONNECT"), "the upstream proxy was never asked")

	// A NO_PROXY name: resolved by the daemon and dialled directly.
	conns := up.conns.Load()
	resp, _ = roundTrip(t, proxy, "CONNECT direct.test:"+up.port+" HTTP/1.1\r\n\r\n", "CONNECT")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 1, resolver.count("direct.test"))
	assert.Equal(t, strings.Count(before, "CONNECT")+0, strings.Count(readFile(t, logPath), "CONNECT"), "NO_PROXY bypasses the upstream")
	assert.Eventually(t, func() bool { return up.conns.Load() == conns+1 }, 5*time.Second, 10*time.Millisecond)
}

// An upstream proxy that refuses the CONNECT (here: a port it does not
// allow, as squid refuses all but 443 by default) is a clear 502 that
// names the upstream's answer.
func TestUpstreamProxyRefusalIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bufio.NewReader(c).ReadString('\n')
				c.Write([]byte("HTTP/1.1 403 CONNECT port not allowed\r\nContent-Length: 0\r\n\r\n"))
			}()
		}
	}()
	u, err := UpstreamFromEnv(envOf("HTTPS_PROXY", "http://"+ln.Addr().String()))
	require.NoError(t, err)
	via, _ := url.Parse("http://" + ln.Addr().String())
	_, err = u.Connect(t.Context(), (&net.Dialer{}).DialContext, via, "a.example", 8443)
	require.ErrorContains(t, err, "403 CONNECT port not allowed")
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
