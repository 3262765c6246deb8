package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"sync"
)

// Visitor serves the visitor port: a proxy listener that the daemon holds
// for the sandbox's whole life, so that the agent can neither use it nor take
// the port first (docs/failures.md#visitor-port-held-and-token-guarded). It
// answers only while a visit (the verifier, a healthcheck) is open, and each
// visit has its own token and policy, so that concurrent visitors never share
// or clobber one (docs/failures.md#concurrent-visitors-share-nothing).
type Visitor struct {
	// Proxy is the template for serving: resolver, dialer, audit, limits.
	// Its Policy and Token are not used.
	Proxy Proxy

	mu     sync.Mutex
	visits map[string]*visit // by tokenKey
}

type visit struct {
	policy Policy
	ctx    context.Context
	cancel context.CancelFunc
}

// Open starts a visit under policy and returns its fresh token (to put in the
// visitor's proxy URL, see VisitorURL) and the function that ends the visit:
// from then on the token is refused and the visit's connections are closed.
func (v *Visitor) Open(policy Policy) (token string, done func()) {
	var b [32]byte
	rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	key := tokenKey(token)
	v.mu.Lock()
	if v.visits == nil {
		v.visits = make(map[string]*visit)
	}
	v.visits[key] = &visit{policy: policy, ctx: ctx, cancel: cancel}
	v.mu.Unlock()
	return token, func() {
		v.mu.Lock()
		delete(v.visits, key)
		v.mu.Unlock()
		cancel()
	}
}

// lookup is the Visitor's grant: the open visit that token belongs to.
func (v *Visitor) lookup(token string) (grant, bool) {
	if token == "" {
		return grant{}, false
	}
	key := tokenKey(token)
	v.mu.Lock()
	defer v.mu.Unlock()
	vis, ok := v.visits[key]
	if !ok || vis.ctx.Err() != nil {
		return grant{}, false
	}
	return grant{policy: vis.policy, ctx: vis.ctx, key: key}, true
}

// Serve answers on ln until ctx ends; with no visit open, every request gets
// 407 and its connection is closed.
func (v *Visitor) Serve(ctx context.Context, ln net.Listener) error {
	p := v.Proxy
	p.grant = v.lookup
	return p.Serve(ctx, ln)
}

// VisitorURL is the proxy URL a visit's programs use: addr with the token as
// Basic credentials, which curl, pip, git, apt and Go all send as
// Proxy-Authorization.
func VisitorURL(addr, token string) string {
	return (&url.URL{Scheme: "http", User: url.UserPassword("visit", token), Host: addr}).String()
}
