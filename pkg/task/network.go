package task

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// NetworkMode is a phase's network policy as Harbor names it.
type NetworkMode string

// The three network modes of Harbor's task.toml.
const (
	NetworkPublic    NetworkMode = "public"     // any global host (sandboxd still refuses non-global addresses)
	NetworkNone      NetworkMode = "no-network" // nothing outside the sandbox; no proxy at all
	NetworkAllowlist NetworkMode = "allowlist"  // only the hosts in AllowedHosts
)

// Network is a resolved network policy: a mode, and the hosts an allowlist admits.
type Network struct {
	Mode         NetworkMode
	AllowedHosts []string // lower-case host names, "*.suffix" patterns, IP addresses or CIDR prefixes; only for allowlist
}

// policy is a network policy as one section of task.toml wrote it; Mode "" means
// the section did not say.
type policy struct {
	mode  NetworkMode
	hosts []string
}

func (p policy) set() bool { return p.mode != "" }

// readPolicy reads network_mode and allowed_hosts of one section. Following
// Harbor, allowed_hosts without network_mode means an allowlist.
func readPolicy(t *table) policy {
	var pol policy
	modeOK := true
	if s, ok := t.str("network_mode"); ok {
		switch m := NetworkMode(s); m {
		case NetworkPublic, NetworkNone, NetworkAllowlist:
			pol.mode = m
		default:
			modeOK = false
			t.d.fail(t.at.Child("network_mode"), `%q is not a network mode: write "public", "no-network" or "allowlist"`, s)
		}
	}
	hosts, hostsSet := t.strings("allowed_hosts", `["pypi.org", "*.pythonhosted.org"]`)
	hostsOK := true
	hp := t.at.Child("allowed_hosts")
	for _, h := range hosts {
		n, err := normalizeHost(h)
		if err != nil {
			hostsOK = false
			t.d.fail(hp, "%v", err)
			continue
		}
		if !slices.Contains(pol.hosts, n) {
			pol.hosts = append(pol.hosts, n)
		}
	}
	if pol.mode == "" && modeOK && len(hosts) > 0 {
		pol.mode = NetworkAllowlist
	}
	switch {
	case !modeOK || !hostsOK:
	case pol.mode == NetworkAllowlist && !hostsSet:
		t.d.fail(t.at.Child("network_mode"), `"allowlist" needs the hosts it admits: add allowed_hosts = ["example.com"], or write network_mode = "no-network"`)
	case pol.mode == NetworkAllowlist && len(pol.hosts) == 0:
		t.d.fail(hp, `an allowlist with no hosts admits nothing: list hosts, or write network_mode = "no-network"`)
	case pol.mode != NetworkAllowlist && len(hosts) > 0:
		t.d.fail(hp, `allowed_hosts only applies to network_mode = "allowlist" (this section says %q): remove allowed_hosts or write network_mode = "allowlist"`, pol.mode)
	}
	return pol
}

var hostLabel = lazyRegexp(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// normalizeHost lower-cases an allowlist entry and checks it is a host name,
// a "*.suffix" pattern, an IP address or a CIDR prefix — never a URL or a port.
func normalizeHost(h string) (string, error) {
	v := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	example := `write a host name such as "pypi.org" or a pattern such as "*.pythonhosted.org"`
	switch {
	case v == "":
		return "", fmt.Errorf("empty entry in allowed_hosts: remove it")
	case strings.Contains(v, "://"):
		return "", fmt.Errorf("entry %q is a URL: %s", h, example)
	}
	if pfx, err := netip.ParsePrefix(v); err == nil {
		if pfx != pfx.Masked() {
			return "", fmt.Errorf("entry %q has host bits set: write %q", h, pfx.Masked().String())
		}
		return pfx.String(), nil
	}
	if addr, err := netip.ParseAddr(v); err == nil && addr.Zone() == "" {
		return addr.String(), nil
	}
	if strings.ContainsAny(v, "/:") {
		return "", fmt.Errorf("entry %q has a port or a path: %s", h, example)
	}
	name := v
	if strings.HasPrefix(v, "*.") {
		name = v[2:]
		if _, err := netip.ParseAddr(name); err == nil {
			return "", fmt.Errorf("entry %q puts a wildcard on an IP address: write the address alone", h)
		}
	}
	if name == "" || strings.Contains(name, "*") {
		return "", fmt.Errorf("entry %q: a wildcard must be a leading \"*.\" followed by a domain; %s", h, example)
	}
	for _, l := range strings.Split(name, ".") {
		if !hostLabel().MatchString(l) {
			return "", fmt.Errorf("entry %q is not a host name (letters, digits, hyphens and dots only): %s", h, example)
		}
	}
	return v, nil
}

// resolve gives the phase its own policy, or the environment's when it has none.
func (p policy) resolve(base Network) Network {
	if !p.set() {
		return Network{Mode: base.Mode, AllowedHosts: slices.Clone(base.AllowedHosts)}
	}
	n := Network{Mode: p.mode}
	if p.mode == NetworkAllowlist {
		n.AllowedHosts = slices.Clone(p.hosts)
	}
	return n
}
