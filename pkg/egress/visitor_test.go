package egress

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func startVisitor(t *testing.T, res Resolver) (*Visitor, string) {
	v := &Visitor{Proxy: Proxy{Resolver: res, Log: quietLog, Dial: (&dialRecorder{t: t}).dial}}
	return v, serveOn(t, v.Serve)
}

func basic(token string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("visit:"+token)) + "\r\n"
}

// The visitor port needs a token and answers only while a visit is open
// (docs/failures.md#visitor-port-held-and-token-guarded).
func TestVisitorPortNeedsToken(t *testing.T) {
	up := okUpstream(t)
	v, addr := startVisitor(t, resolverOf("up.test", "127.0.0.1"))
	get := func(auth string) *http.Response {
		resp, _ := roundTrip(t, addr, "GET http://up.test:"+up.port+"/ HTTP/1.1\r\n"+auth+"\r\n", "GET")
		return resp
	}

	resp := get("")
	assert.Equal(t, 407, resp.StatusCode, "no visit open")
	assert.NotEmpty(t, resp.Header.Get("Proxy-Authenticate"))

	token, done := v.Open(publicLoopback())
	require.Len(t, token, 64)
	assert.Equal(t, 407, get("").StatusCode, "no token")
	assert.Equal(t, 407, get(basic("wrong")).StatusCode, "wrong token")
	assert.Equal(t, 407, get("Proxy-Authorization: Bearer "+token[:63]+"\r\n").StatusCode, "truncated token")
	assert.Equal(t, 200, get(basic(token)).StatusCode, "Basic")
	assert.Equal(t, 200, get("Proxy-Authorization: Bearer "+token+"\r\n").StatusCode, "Bearer")

	done()
	assert.Equal(t, 407, get(basic(token)).StatusCode, "visit over")

	// The port stays held between visits: nobody else can listen there.
	_, err := net.Listen("tcp", addr)
	assert.Error(t, err, "the visitor port cannot be taken while the daemon holds it")
}

// A visit that ends takes its open tunnels with it.
func TestVisitEndClosesItsTunnels(t *testing.T) {
	up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	v, addr := startVisitor(t, resolverOf("up.test", "127.0.0.1"))
	token, done := v.Open(publicLoopback())
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT up.test:%s HTTP/1.1\r\n%s\r\n", up.port, basic(token))
	br := bufio.NewReader(c)
	resp, _, err := readResponseOn(br, "CONNECT")
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	done()
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF)
}

// Concurrent visitors get their own tokens, each under its own policy, and
// one ending does not end the other
// (docs/failures.md#concurrent-visitors-share-nothing).
func TestConcurrentVisitorsGetTheirOwnTokens(t *testing.T) {
	up := okUpstream(t)
	v, addr := startVisitor(t, resolverOf("verifier.test", "127.0.0.1", "health.test", "127.0.0.1"))
	only := func(host string) Policy {
		p, err := ParsePolicy("allowlist", []string{host}, []string{"127.0.0.0/8"})
		require.NoError(t, err)
		return p
	}
	verifier, doneVerifier := v.Open(only("verifier.test"))
	health, doneHealth := v.Open(only("health.test"))
	defer doneHealth()
	require.NotEqual(t, verifier, health)

	get := func(host, token string) int {
		resp, _ := roundTrip(t, addr, "GET http://"+host+":"+up.port+"/ HTTP/1.1\r\n"+basic(token)+"\r\n", "GET")
		return resp.StatusCode
	}
	assert.Equal(t, 200, get("verifier.test", verifier))
	assert.Equal(t, 403, get("health.test", verifier))
	assert.Equal(t, 200, get("health.test", health))
	assert.Equal(t, 403, get("verifier.test", health))

	doneVerifier()
	assert.Equal(t, 407, get("verifier.test", verifier))
	assert.Equal(t, 200, get("health.test", health))
}

func TestVisitorURLCarriesToken(t *testing.T) {
	u, err := url.Parse(VisitorURL("127.0.0.1:3129", "abc123"))
	require.NoError(t, err)
	pass, _ := u.User.Password()
	assert.Equal(t, "abc123", pass)
	assert.Equal(t, "127.0.0.1:3129", u.Host)
}

// A plain proxy with a Token refuses clients without it.
func TestProxyToken(t *testing.T) {
	up := okUpstream(t)
	addr := startProxy(t, &Proxy{Policy: publicLoopback(), Token: "s3cret", Resolver: resolverOf("up.test", "127.0.0.1")})
	for auth, want := range map[string]int{"": 407, basic("nope"): 407, basic("s3cret"): 200} {
		resp, _ := roundTrip(t, addr, "GET http://up.test:"+up.port+"/ HTTP/1.1\r\n"+auth+"\r\n", "GET")
		assert.Equal(t, want, resp.StatusCode, "auth %q", auth)
	}
}

// The verifier uses its own allowlist, not the agent's: what the agent's
// proxy refuses, the verifier's visit may reach
// (docs/failures.md#verifier-has-its-own-allowlist).
func TestVerifierUsesItsOwnAllowlist(t *testing.T) {
	up := okUpstream(t)
	res := resolverOf("pypi.test", "127.0.0.1", "task.test", "127.0.0.1")
	agentPolicy, err := ParsePolicy("allowlist", []string{"task.test"}, []string{"127.0.0.0/8"})
	require.NoError(t, err)
	verifierPolicy, err := ParsePolicy("allowlist", []string{"pypi.test"}, []string{"127.0.0.0/8"})
	require.NoError(t, err)
	agent := startProxy(t, &Proxy{Policy: agentPolicy, Resolver: res})
	v, visitor := startVisitor(t, res)
	token, done := v.Open(verifierPolicy)
	defer done()

	get := func(proxy, auth string) int {
		resp, _ := roundTrip(t, proxy, "GET http://pypi.test:"+up.port+"/simple/ HTTP/1.1\r\n"+auth+"\r\n", "GET")
		return resp.StatusCode
	}
	assert.Equal(t, 403, get(agent, ""), "the agent may not")
	assert.Equal(t, 200, get(visitor, basic(token)), "the verifier may")
}

// A no-network visit gets no proxy variables and the visitor port reaches
// nothing for it, not even with its token
// (docs/failures.md#no-network-verifier-keeps-chown-and-loopback).
func TestNoNetworkVisitReachesNothing(t *testing.T) {
	v := &Visitor{Proxy: Proxy{Resolver: resolverOf("up.test", "127.0.0.1"), Log: quietLog, Dial: noDial(t)}}
	addr := serveOn(t, v.Serve)
	token, done := v.Open(Policy{Mode: NoNetwork})
	defer done()
	assert.Nil(t, ProxyEnv("", nil))
	for _, raw := range []string{
		"GET http://up.test/ HTTP/1.1\r\n" + basic(token) + "\r\n",
		"CONNECT up.test:443 HTTP/1.1\r\n" + basic(token) + "\r\n",
		"GET http://127.0.0.1/ HTTP/1.1\r\n" + basic(token) + "\r\n",
	} {
		resp, _ := roundTrip(t, addr, raw, "GET")
		assert.Equal(t, 403, resp.StatusCode, raw)
	}
}
