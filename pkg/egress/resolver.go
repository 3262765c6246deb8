package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/imagefile"
	"golang.org/x/net/dns/dnsmessage"
)

// SnapshotResolver answers from the hosts file and name servers as they were
// when it was made. The proxies resolve names for the agent, and the agent's
// root can rewrite /etc/hosts and /etc/resolv.conf in the filesystem it
// shares with the daemon: a resolver that read them at each lookup would let
// the agent point an allowlisted name at any address (the guard still refuses
// non-global ones, but the allowlist would mean nothing). Go's own resolver
// always consults the live files, so this one speaks DNS itself.
type SnapshotResolver struct {
	hosts   map[string][]netip.Addr
	servers []string // host:port
	timeout time.Duration
}

// NewSnapshotResolver reads hostsPath and resolvConfPath now; a missing file
// is an empty one (no hosts; no servers means only the hosts answer).
func NewSnapshotResolver(hostsPath, resolvConfPath string) (*SnapshotResolver, error) {
	hosts, err := imagefile.Hosts(hostsPath, maxSnapshotFile)
	if err != nil {
		return nil, err
	}
	r := &SnapshotResolver{hosts: hosts, timeout: 5 * time.Second}
	if err := eachLine(resolvConfPath, func(f []string) {
		if f[0] == "nameserver" && len(f) > 1 {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				r.servers = append(r.servers, netip.AddrPortFrom(a, 53).String())
			}
		}
	}); err != nil {
		return nil, err
	}
	return r, nil
}

// WithServers replaces the name servers (host:port), for tests.
func (r *SnapshotResolver) WithServers(servers ...string) *SnapshotResolver {
	r.servers = servers
	return r
}

// eachLine calls fn with the fields of each line of a resolv.conf file,
// comments removed.
func eachLine(path string, fn func([]string)) error {
	return imagefile.Lines(path, maxSnapshotFile, func(line string) {
		line, _, _ = strings.Cut(line, "#")
		if f := strings.Fields(line); len(f) > 0 {
			fn(f)
		}
	})
}

// maxSnapshotFile bounds how much of /etc/hosts or /etc/resolv.conf is read.
const maxSnapshotFile = 16 << 20

// LookupNetIP implements Resolver: the snapshot's hosts first, then A and
// AAAA queries to the snapshot's servers, the first that answers winning.
func (r *SnapshotResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if a, ok := r.hosts[name]; ok {
		return filterFamily(a, network), nil
	}
	if len(r.servers) == 0 {
		return nil, &net.DNSError{Err: "no name servers", Name: host, IsNotFound: true}
	}
	var types []dnsmessage.Type
	switch network {
	case "ip4":
		types = []dnsmessage.Type{dnsmessage.TypeA}
	case "ip6":
		types = []dnsmessage.Type{dnsmessage.TypeAAAA}
	default:
		types = []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA}
	}
	var lastErr error
	for _, server := range r.servers {
		var addrs []netip.Addr
		answered := false
		for _, t := range types {
			got, err := r.query(ctx, server, name, t)
			if err != nil {
				lastErr = err
				continue
			}
			answered = true
			addrs = append(addrs, got...)
		}
		if answered {
			if len(addrs) == 0 {
				return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
			}
			return addrs, nil
		}
	}
	return nil, &net.DNSError{Err: fmt.Sprintf("no name server answered: %v", lastErr), Name: host, IsTemporary: true}
}

func filterFamily(addrs []netip.Addr, network string) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if (network == "ip4" && !a.Is4()) || (network == "ip6" && !a.Is6()) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// query asks one server one question over UDP. An answer that says the name
// does not exist is an empty answer, not an error.
func (r *SnapshotResolver) query(ctx context.Context, server, name string, t dnsmessage.Type) ([]netip.Addr, error) {
	qname, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, err
	}
	id := uint16(time.Now().UnixNano())
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: qname, Type: t, Class: dnsmessage.ClassINET}},
	}
	packed, err := msg.Pack()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := conn.Write(packed); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil || h.ID != id || !h.Response {
			continue // not our answer
		}
		if h.RCode == dnsmessage.RCodeNameError {
			return nil, nil
		}
		if h.RCode != dnsmessage.RCodeSuccess {
			return nil, fmt.Errorf("%s answered %v", server, h.RCode)
		}
		if err := p.SkipAllQuestions(); err != nil {
			return nil, err
		}
		var out []netip.Addr
		for {
			ah, err := p.AnswerHeader()
			if errors.Is(err, dnsmessage.ErrSectionDone) {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			switch ah.Type {
			case dnsmessage.TypeA:
				rr, err := p.AResource()
				if err != nil {
					return nil, err
				}
				out = append(out, netip.AddrFrom4(rr.A))
			case dnsmessage.TypeAAAA:
				rr, err := p.AAAAResource()
				if err != nil {
					return nil, err
				}
				out = append(out, netip.AddrFrom16(rr.AAAA).Unmap())
			default:
				if err := p.SkipAnswer(); err != nil {
					return nil, err
				}
			}
		}
	}
}
