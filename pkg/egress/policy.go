package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// Mode is how much of the network a phase may reach.
type Mode string

// The modes a task (or `serve --network`) can ask for.
const (
	Public    Mode = "public"     // any globally reachable host
	Allowlist Mode = "allowlist"  // only the names in Policy.AllowedHosts
	NoNetwork Mode = "no-network" // nothing: no proxy listens at all
)

// Policy says which destinations one phase (or one visit) may reach.
type Policy struct {
	Mode Mode
	// AllowedHosts are exact names and "*.suffix" patterns (subdomains
	// only), in ASCII (punycode) lower case without a trailing dot.
	AllowedHosts []string
	// AllowCIDRs open address ranges that the guard would otherwise refuse
	// (--egress-allow-cidr), for deliberate exceptions such as a loopback
	// upstream in tests.
	AllowCIDRs []netip.Prefix
}

// ErrBlockedHost is wrapped by every refusal of a name by the allowlist.
var ErrBlockedHost = errors.New("host not allowed by the network policy")

// ParsePolicy builds a Policy from the task's or the command line's words,
// normalizing host patterns so that matching later is a plain comparison.
func ParsePolicy(mode string, hosts, cidrs []string) (Policy, error) {
	p := Policy{Mode: Mode(mode)}
	switch p.Mode {
	case Public, Allowlist, NoNetwork:
	default:
		return Policy{}, fmt.Errorf("network mode %q: unknown, use %q, %q or %q", mode, Public, Allowlist, NoNetwork)
	}
	if p.Mode == NoNetwork && (len(hosts) > 0 || len(cidrs) > 0) {
		return Policy{}, fmt.Errorf("network mode %q takes no --allow-host or --egress-allow-cidr: drop them or use %q", NoNetwork, Allowlist)
	}
	if p.Mode == Public && len(hosts) > 0 {
		return Policy{}, fmt.Errorf("network mode %q allows every host already: drop --allow-host or use %q", Public, Allowlist)
	}
	if p.Mode == Allowlist && len(hosts) == 0 {
		return Policy{}, fmt.Errorf("network mode %q with no --allow-host reaches nothing: add --allow-host NAME or use %q", Allowlist, NoNetwork)
	}
	for _, h := range hosts {
		pat, err := normalizePattern(h)
		if err != nil {
			return Policy{}, fmt.Errorf("allowed host %q: %w", h, err)
		}
		p.AllowedHosts = append(p.AllowedHosts, pat)
	}
	for _, c := range cidrs {
		pfx, err := parseCIDR(c)
		if err != nil {
			return Policy{}, err
		}
		p.AllowCIDRs = append(p.AllowCIDRs, pfx)
	}
	return p, nil
}

// parseCIDR accepts a prefix or a bare address (a single-host range).
func parseCIDR(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("egress allow CIDR %q: want a range like 10.1.0.0/16 or fd00::/64: %w", s, err)
	}
	return pfx.Masked(), nil
}

// normalizePattern validates one allowlist entry and brings it to the form
// NormalizeHost gives request hosts.
func normalizePattern(s string) (string, error) {
	rest, wild := strings.CutPrefix(s, "*.")
	if strings.Contains(rest, "*") {
		if rest == "*" || s == "*" {
			return "", fmt.Errorf("a lone wildcard matches everything: use --network %s instead", Public)
		}
		return "", errors.New(`a wildcard may only be a leading "*." (like *.example.com)`)
	}
	h, err := NormalizeHost(rest)
	if err != nil {
		return "", err
	}
	if wild {
		if _, err := netip.ParseAddr(h); err == nil {
			return "", errors.New("a wildcard cannot apply to an IP address")
		}
		return "*." + h, nil
	}
	return h, nil
}

// NormalizeHost brings a host name to the one form the proxy matches and
// resolves: ASCII (punycode) lower case with no trailing dot, or a canonical
// IP address. Matching and resolving the same string is what makes the
// allowlist mean what it says.
func NormalizeHost(host string) (string, error) {
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Errorf("host %q: not an IPv6 address", host)
		}
		return a.String(), nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("host %q: zoned addresses are link-local and never allowed", host)
		}
		return a.String(), nil
	}
	h := strings.TrimSuffix(host, ".")
	if h == "" {
		return "", fmt.Errorf("host %q: empty name", host)
	}
	if isASCII(h) {
		// Plain ASCII takes a fast, lenient path (underscores exist in real
		// names); only the characters that DNS names use may pass.
		h = strings.ToLower(h)
		if err := checkLDH(h); err != nil {
			return "", fmt.Errorf("host %q: %w", host, err)
		}
		if endsInNumber(h) {
			return "", fmt.Errorf("host %q: a name ending in a number is an IPv4 address to browsers and curl (0177.0.0.1 is 127.0.0.1); write the address in its usual form", host)
		}
		return h, nil
	}
	a, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("host %q: not a valid internationalized name: %w", host, err)
	}
	a = strings.TrimSuffix(a, ".")
	if err := checkLDH(a); err != nil {
		return "", fmt.Errorf("host %q: %w", host, err)
	}
	if endsInNumber(a) {
		return "", fmt.Errorf("host %q: a name ending in a number is an IPv4 address to browsers and curl; write the address in its usual form", host)
	}
	return a, nil
}

// endsInNumber is the WHATWG URL parser's test for a host that is an IPv4
// address in some form (octal, hexadecimal, fewer parts): its last label is
// all digits, or 0x and hex digits. netip reads only the dotted-decimal
// form, so such a name would otherwise be matched as a name (a "*.0.1"
// pattern would take "0177.0.0.1") and sent to DNS, while the client meant
// an address. No top-level domain is numeric, so no real name is refused.
func endsInNumber(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// checkLDH accepts lower-case letters, digits, hyphens and underscores in
// non-empty labels of at most 63 bytes, 253 bytes in all.
func checkLDH(h string) error {
	if len(h) > 253 {
		return errors.New("name longer than 253 bytes")
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" {
			return errors.New("empty label")
		}
		if len(label) > 63 {
			return errors.New("label longer than 63 bytes")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	return nil
}

// AllowsHost reports whether the policy lets a request name host at all; the
// address guard still applies to whatever the name resolves to. host must
// come from NormalizeHost.
func (p Policy) AllowsHost(host string) bool {
	switch p.Mode {
	case Public:
		return true
	case Allowlist:
		for _, pat := range p.AllowedHosts {
			if matchHost(pat, host) {
				return true
			}
		}
	}
	return false
}

// matchHost matches one normalized pattern: "*.suffix" matches names below
// suffix but not suffix itself, anything else only the identical name.
func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		if _, err := netip.ParseAddr(host); err == nil {
			return false // "*.3.4" must not match 1.2.3.4
		}
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return pattern == host
}
