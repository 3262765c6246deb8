package egress

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// no_proxy lists loopback and every peer's name and address one by one,
// because curl does not match CIDR ranges
// (docs/failures.md#peers-listed-one-by-one).
func TestNoProxyListsPeersOneByOne(t *testing.T) {
	env := ProxyEnv("http://127.0.0.1:3128", []Peer{
		{Name: "db", Addr: netip.MustParseAddr("127.0.0.1")},
		{Name: "Cache", Addr: netip.MustParseAddr("127.0.0.2")},
		{Name: "search", Addr: netip.MustParseAddr("127.0.0.3")},
	})
	want := "localhost,127.0.0.1,::1,db,cache,127.0.0.2,search,127.0.0.3"
	assert.Equal(t, []string{
		"http_proxy=http://127.0.0.1:3128",
		"https_proxy=http://127.0.0.1:3128",
		"HTTP_PROXY=http://127.0.0.1:3128",
		"HTTPS_PROXY=http://127.0.0.1:3128",
		"no_proxy=" + want,
		"NO_PROXY=" + want,
	}, env)
	for _, kv := range env {
		assert.NotContains(t, kv, "/8", "no CIDR ranges: curl ignores them")
	}
}

// A workspace that may reach no host is told of no proxy at all, and no
// proxy can be served for it
// (docs/failures.md#no-network-means-no-proxy-variables).
func TestNoNetworkGetsNoProxyEnv(t *testing.T) {
	assert.Nil(t, ProxyEnv("", []Peer{{Name: "db", Addr: netip.MustParseAddr("127.0.0.1")}}))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = (&Proxy{Policy: Policy{Mode: NoNetwork}}).Serve(context.Background(), ln)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing may listen")
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.Error(t, err, "the listener was closed")
}

func TestAptProxyConfig(t *testing.T) {
	b, err := AptProxyConfig("http://127.0.0.1:3128")
	require.NoError(t, err)
	assert.Equal(t, "Acquire::http::Proxy \"http://127.0.0.1:3128\";\nAcquire::https::Proxy \"http://127.0.0.1:3128\";\n", string(b))
	assert.NotContains(t, strings.ToLower(string(b)), "sandboxd", "nothing names the harness")
	for _, bad := range []string{"", "http://x\";Acquire::x \"y", "http://a\nb"} {
		_, err := AptProxyConfig(bad)
		assert.Error(t, err, "%q", bad)
	}
}
