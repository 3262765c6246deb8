package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// ErrBlockedAddress is wrapped by every refusal of a resolved address.
var ErrBlockedAddress = errors.New("address not globally reachable")

// special is one range of the IANA special-purpose registries that is not
// globally reachable, or that embeds another address the guard must see.
type special struct {
	prefix netip.Prefix
	name   string
	// embeds extracts the IPv4 address carried inside an IPv6 one; such
	// ranges are judged by what they carry, not refused outright.
	embeds func(netip.Addr) netip.Addr
}

var specials = []special{
	// IPv4 (RFC 6890 and the IANA IPv4 special-purpose registry).
	{prefix: pfx("0.0.0.0/8"), name: "this-network"},
	{prefix: pfx("10.0.0.0/8"), name: "private"},
	{prefix: pfx("100.64.0.0/10"), name: "shared (CGNAT)"},
	{prefix: pfx("127.0.0.0/8"), name: "loopback"},
	{prefix: pfx("169.254.0.0/16"), name: "link-local (metadata)"},
	{prefix: pfx("172.16.0.0/12"), name: "private"},
	{prefix: pfx("192.0.0.0/24"), name: "IETF protocol assignments"},
	{prefix: pfx("192.0.2.0/24"), name: "documentation (TEST-NET-1)"},
	{prefix: pfx("192.88.99.0/24"), name: "6to4 relay anycast"},
	{prefix: pfx("192.168.0.0/16"), name: "private"},
	{prefix: pfx("198.18.0.0/15"), name: "benchmarking"},
	{prefix: pfx("198.51.100.0/24"), name: "documentation (TEST-NET-2)"},
	{prefix: pfx("203.0.113.0/24"), name: "documentation (TEST-NET-3)"},
	{prefix: pfx("224.0.0.0/4"), name: "multicast"},
	{prefix: pfx("240.0.0.0/4"), name: "reserved"}, // includes broadcast

	// IPv6 forms that carry an IPv4 address: judged by what they carry.
	{prefix: pfx("::ffff:0:0/96"), name: "IPv4-mapped", embeds: low32},
	{prefix: pfx("64:ff9b::/96"), name: "NAT64", embeds: low32},
	{prefix: pfx("2002::/16"), name: "6to4", embeds: sixToFour},

	// IPv6 (IANA IPv6 special-purpose registry). Everything outside
	// 2000::/3, the only block allocated for global unicast, is refused
	// below; these are the exceptions inside it.
	{prefix: pfx("2001::/23"), name: "IETF protocol assignments (Teredo, ORCHID, benchmarking)"},
	{prefix: pfx("2001:db8::/32"), name: "documentation"},
	{prefix: pfx("3fff::/20"), name: "documentation"},
}

var globalUnicast6 = pfx("2000::/3")

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func low32(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[12:16]))
}

func sixToFour(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[2:6]))
}

// CheckAddr refuses a destination address unless it is globally reachable or
// inside one of the policy's AllowCIDRs. It applies under every mode: an
// allow-all proxy must still not reach the substrate's own services.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.WithZone("")
	for _, c := range p.AllowCIDRs {
		if c.Contains(a) || c.Contains(a.Unmap()) {
			return nil
		}
	}
	if reason := nonGlobal(a); reason != "" {
		return fmt.Errorf("check %s: %s: %w", a, reason, ErrBlockedAddress)
	}
	return nil
}

// nonGlobal names the special-purpose range a falls into, or returns "".
func nonGlobal(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid address"
	}
	for _, s := range specials {
		if !s.prefix.Contains(a) {
			continue
		}
		if s.embeds == nil {
			return s.name + " range " + s.prefix.String()
		}
		if r := nonGlobal(s.embeds(a)); r != "" {
			return s.name + " form of " + r
		}
		return ""
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		switch {
		case a.IsUnspecified():
			return "unspecified address"
		case a.IsLoopback():
			return "loopback"
		case a.IsLinkLocalUnicast():
			return "link-local range fe80::/10"
		case a.IsMulticast():
			return "multicast range ff00::/8"
		case pfx("fc00::/7").Contains(a):
			return "unique local range fc00::/7"
		}
		return "outside global unicast 2000::/3"
	}
	return ""
}

// embedded returns a and every IPv4 address it carries, so that a check
// against a list of addresses also catches their IPv6 disguises.
func embedded(a netip.Addr) []netip.Addr {
	out := []netip.Addr{a.WithZone("")}
	for _, s := range specials {
		if s.embeds != nil && s.prefix.Contains(a) {
			out = append(out, s.embeds(a))
		}
	}
	return out
}

// LocalAddrs lists the addresses of this host's interfaces, which the daemon
// passes as Proxy.Own so that the sandbox cannot reach the daemon's services
// on a public address either.
func LocalAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
