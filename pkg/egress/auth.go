package egress

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strings"

	"github.com/sandboxd/sandboxd/pkg/egress/internal/http1"
)

// fixedGrant is the plain proxy's grant: its one policy, if the token fits.
func (p *Proxy) fixedGrant(token string) (grant, bool) {
	if p.Token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(p.Token)) != 1 {
		return grant{}, false
	}
	return grant{policy: p.Policy, ctx: context.Background()}, true
}

// proxyToken extracts the credential of a Proxy-Authorization field.
func proxyToken(h http1.Header) string {
	scheme, cred, _ := strings.Cut(strings.Trim(h.Get("Proxy-Authorization"), " \t"), " ")
	cred = strings.Trim(cred, " \t")
	switch strings.ToLower(scheme) {
	case "bearer":
		return cred
	case "basic":
		b, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return ""
		}
		user, pass, _ := strings.Cut(string(b), ":")
		if pass == "" {
			return user
		}
		return pass
	}
	return ""
}

// tokenKey is how visits are looked up: by hash, so that comparing keys
// leaks nothing useful about a token.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return string(sum[:])
}
