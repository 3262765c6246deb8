package egress

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// Upstream is the substrate's own proxy: the HTTPS_PROXY, HTTP_PROXY and
// NO_PROXY of the environment serve started in, as clusters behind a
// company proxy set them. Where it applies, the egress reaches a name
// through it with CONNECT name:port instead of dialling an address.
//
// The policy is still judged by name first. The address guard cannot be:
// the upstream proxy resolves the name, out of the daemon's sight. So a
// name that resolves to a private address reaches it through a proxy that
// lets it, and `status` says so.
type Upstream struct {
	cfg   *httpproxy.Config
	proxy func(*url.URL) (*url.URL, error)
}

// UpstreamFromEnv reads the upstream proxy from getenv (upper case first,
// then lower case, as curl and Go read them); nil when none is set.
func UpstreamFromEnv(getenv func(string) string) (*Upstream, error) {
	get := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return getenv(strings.ToLower(name))
	}
	cfg := &httpproxy.Config{HTTPSProxy: get("HTTPS_PROXY"), HTTPProxy: get("HTTP_PROXY"), NoProxy: get("NO_PROXY")}
	if cfg.HTTPSProxy == "" && cfg.HTTPProxy == "" {
		return nil, nil
	}
	for name, v := range map[string]string{"HTTPS_PROXY": cfg.HTTPSProxy, "HTTP_PROXY": cfg.HTTPProxy} {
		if v == "" {
			continue
		}
		u, err := parseProxyURL(v)
		if err != nil {
			return nil, fmt.Errorf("the substrate's %s %q: %w; give it as http://HOST:PORT", name, redact(v), err)
		}
		if u.Scheme != "http" {
			return nil, fmt.Errorf("the substrate's %s %q: scheme %s is not supported; the egress speaks CONNECT to an http:// proxy", name, redact(v), u.Scheme)
		}
	}
	return &Upstream{cfg: cfg, proxy: cfg.ProxyFunc()}, nil
}

func parseProxyURL(v string) (*url.URL, error) {
	if !strings.Contains(v, "://") {
		v = "http://" + v
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil, err
	}
	if u.Hostname() == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

// redact hides a proxy URL's password, for messages and status.
func redact(v string) string {
	u, err := parseProxyURL(v)
	if err != nil || u.User == nil {
		return v
	}
	return u.Redacted()
}

// For is the proxy through which host:port is reached, or nil when none
// applies (no proxy set for the scheme, or NO_PROXY names host). Port 80
// is judged as HTTP, every other port as HTTPS, since either travels as
// CONNECT.
func (u *Upstream) For(host string, port uint16) *url.URL {
	if u == nil {
		return nil
	}
	scheme := "https"
	if port == 80 {
		scheme = "http"
	}
	p, err := u.proxy(&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(int(port)))})
	if err != nil || p == nil {
		return nil
	}
	return p
}

// Describe is the upstream proxy as status shows it, passwords hidden.
func (u *Upstream) Describe() *UpstreamStatus {
	if u == nil {
		return nil
	}
	return &UpstreamStatus{HTTPSProxy: redact(u.cfg.HTTPSProxy), HTTPProxy: redact(u.cfg.HTTPProxy), NoProxy: u.cfg.NoProxy,
		Note: "names outside no_proxy are reached with CONNECT through this proxy, which resolves them: the address guard cannot see where they lead, and many proxies (squid among them) refuse CONNECT to ports other than 443"}
}

// UpstreamStatus is Upstream as `sandboxd status` reports it.
type UpstreamStatus struct {
	HTTPSProxy string `json:"https_proxy,omitempty"`
	HTTPProxy  string `json:"http_proxy,omitempty"`
	NoProxy    string `json:"no_proxy,omitempty"`
	Note       string `json:"note"`
}

// maxConnectResponse bounds the upstream proxy's answer to CONNECT.
const maxConnectResponse = 16 << 10

// Connect opens a tunnel to host:port through the proxy p with dial,
// which reaches the proxy itself (an address the operator chose, so the
// guard does not judge it). It fails unless the proxy answers 2xx.
func (u *Upstream) Connect(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), p *url.URL, host string, port uint16) (net.Conn, error) {
	proxyAddr := p.Host
	if p.Port() == "" {
		proxyAddr = net.JoinHostPort(p.Hostname(), "80")
	}
	conn, err := dial(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("reach the upstream proxy %s: %w", p.Redacted(), err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	} else {
		conn.SetDeadline(time.Now().Add(DefaultDialTimeout))
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if p.User != nil {
		pass, _ := p.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pass)) + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s through %s: %w", target, p.Redacted(), err)
	}
	// Read the answer byte by byte up to its blank line, so that nothing
	// of the tunnel's first bytes is taken from the connection.
	var head []byte
	var one [1]byte
	for !strings.HasSuffix(string(head), "\r\n\r\n") && !strings.HasSuffix(string(head), "\n\n") {
		if _, err := io.ReadFull(conn, one[:]); err != nil {
			conn.Close()
			return nil, fmt.Errorf("CONNECT %s through %s: the proxy's answer: %w", target, p.Redacted(), err)
		}
		if head = append(head, one[0]); len(head) > maxConnectResponse {
			conn.Close()
			return nil, fmt.Errorf("CONNECT %s through %s: the proxy's answer exceeds %d bytes", target, p.Redacted(), maxConnectResponse)
		}
	}
	status, _, _ := strings.Cut(string(head), "\n")
	fields := strings.Fields(status)
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "HTTP/1.") || len(fields[1]) != 3 || fields[1][0] != '2' {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s through %s: the proxy answered %q", target, p.Redacted(), strings.TrimSpace(status))
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}
