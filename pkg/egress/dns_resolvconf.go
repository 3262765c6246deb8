package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// ResolvConf is the sandbox's /etc/resolv.conf, for a data bind in the
// agent's view and the visitors': the sandbox's resolver as its only name
// server, and the substrate's search and options lines (Kubernetes' ndots:5
// and search domains, Docker's options), so that short names resolve as
// under Docker. The substrate's file is read beneath / without following a
// magic link; a missing one keeps nothing.
func ResolvConf(substratePath string) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# sandboxd: the sandbox's resolver answers under the task's network policy\nnameserver %s\n", ResolverAddr.Addr())
	if err := eachLine(substratePath, func(f []string) {
		switch f[0] {
		case "search", "domain", "options":
			b.WriteString(strings.Join(f, " "))
			b.WriteByte('\n')
		}
	}); err != nil {
		return nil, fmt.Errorf("read the substrate's %s for the sandbox's copy: %w", substratePath, err)
	}
	return []byte(b.String()), nil
}

// Servers are the name servers the snapshot took (host:port), which the
// sandbox's resolver forwards to.
func (r *SnapshotResolver) Servers() []string { return append([]string(nil), r.servers...) }

// Hosts are the snapshot's hosts file entries, which the sandbox's
// resolver answers first.
func (r *SnapshotResolver) Hosts() map[string][]netip.Addr { return r.hosts }
