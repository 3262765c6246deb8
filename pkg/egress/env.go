package egress

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
)

// Peer is a declared substrate service as the sandbox sees it: its name and
// the loopback address it is offered on.
type Peer struct {
	Name string
	Addr netip.Addr
}

// ProxyEnv is the environment that points a session's programs at the proxy.
// An empty proxyURL (the no-network case, where nothing listens) gives no
// variables at all: a proxy variable pointing at nothing reads as a broken
// network (docs/failures.md#no-network-means-no-proxy-variables). no_proxy
// lists loopback and every peer's name and address one by one, because curl
// does not match CIDR ranges (docs/failures.md#peers-listed-one-by-one).
func ProxyEnv(proxyURL string, peers []Peer) []string {
	if proxyURL == "" {
		return nil
	}
	noProxy := []string{"localhost", "127.0.0.1", "::1"}
	seen := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			noProxy = append(noProxy, s)
		}
	}
	for _, p := range peers {
		add(strings.ToLower(p.Name))
		if p.Addr.IsValid() {
			add(p.Addr.String())
		}
	}
	np := strings.Join(noProxy, ",")
	return []string{
		"http_proxy=" + proxyURL,
		"https_proxy=" + proxyURL,
		"HTTP_PROXY=" + proxyURL,
		"HTTPS_PROXY=" + proxyURL,
		"no_proxy=" + np,
		"NO_PROXY=" + np,
	}
}

// AptProxyConfig is an apt.conf.d snippet that sends apt through the proxy,
// for a data bind into the agent's view only: the verifier shares /etc and
// must use its own way out. The text names no harness
// (docs/failures.md#nothing-inside-names-the-harness).
func AptProxyConfig(proxyURL string) ([]byte, error) {
	if proxyURL == "" || strings.ContainsAny(proxyURL, "\"\\;{}\r\n\x00") {
		return nil, fmt.Errorf("apt proxy config for %q: the URL is empty or holds characters apt.conf cannot quote", proxyURL)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Acquire::http::Proxy \"%s\";\n", proxyURL)
	fmt.Fprintf(&b, "Acquire::https::Proxy \"%s\";\n", proxyURL)
	return b.Bytes(), nil
}
