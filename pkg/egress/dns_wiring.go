package egress

import (
	"log/slog"
	"net/netip"
)

// resolvConfPath is where the sandbox's programs look for their name server.
const resolvConfPath = "/etc/resolv.conf"

// resolvConfFile is the agent's view's resolv.conf, naming the sandbox's
// resolver, for Plan to add to the agent's files in every mode (under
// no-network the resolver answers REFUSED at once, where the substrate's
// server would be unreachable).
func resolvConfFile() (File, error) {
	conf, err := ResolvConf(resolvConfPath)
	if err != nil {
		return File{}, err
	}
	return File{Path: resolvConfPath, Data: conf}, nil
}

// ResolvConf is the sandbox's resolv.conf, for the visitors' views (the
// verifier, the healthcheck), so that they ask the sandbox's resolver as the
// agent does; nil when the agent's view has none of its own.
func (w *Wiring) ResolvConf() []byte {
	for _, f := range w.files {
		if f.Path == resolvConfPath {
			return f.Data
		}
	}
	return nil
}

// resolverServer is the sandbox's resolver as Start serves it on
// ResolverAddr: the snapshot's hosts and the peers first, then the
// snapshot's name servers under the agent's policy, or the policy
// policyFor attributes a query to (nil: the agent's for all). A resolver
// that is not a snapshot (tests) gives no name servers: every name outside
// the hosts file is SERVFAIL.
func (w *Wiring) resolverServer(r Resolver, audit *Audit, log *slog.Logger,
	policyFor func(network string, client netip.AddrPort) (string, Policy, bool)) *DNSServer {
	c := DNSConfig{Peers: w.named(), Agent: w.net.Agent, PolicyFor: policyFor, Answers: w.answers, Audit: audit, Log: log}
	if snap, ok := r.(*SnapshotResolver); ok {
		c.Hosts = snap.Hosts()
		c.Upstream = &DNSForwarder{Servers: snap.Servers()}
	}
	return NewDNSServer(c)
}
