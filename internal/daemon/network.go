package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/cleanup"
	"github.com/sandboxd/sandboxd/internal/imagefile"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

// Fixed ports inside the sandbox's network namespace.
const (
	agentProxyPort   = 3128
	visitorProxyPort = 3129
)

// Peer is a substrate service offered inside the sandbox under a name.
type Peer struct {
	Name   string
	Port   int
	Target string // host:port on the substrate; "" is 127.0.0.1:Port
}

// Network is the task's network declaration for both phases.
type Network struct {
	Agent    egress.Policy
	Verifier egress.Policy
	Peers    []Peer
}

// placedPeer is a peer with the loopback address it got inside the sandbox
// and the address its target resolved to at start.
type placedPeer struct {
	Peer
	Addr netip.AddrPort
	Dial netip.AddrPort // set by resolvePeers; every connection goes there
}

// peerResolveWait bounds how long serve's start waits for the peers'
// targets to resolve: a compose service may join the network a moment after
// this container starts.
var peerResolveWait = 10 * time.Second

// resolvePeers resolves each peer's target once, with the resolver taken at
// start, before any agent code runs. Resolving at each connection would read
// the shared /etc/hosts, which the agent's root can rewrite (or swap with a
// new /etc) to lead its peer to any substrate service on loopback, even
// under no-network. A target that does not resolve fails the start.
func resolvePeers(ctx context.Context, r egress.Resolver, peers []placedPeer) error {
	ctx, cancel := context.WithTimeout(ctx, peerResolveWait)
	defer cancel()
	for i := range peers {
		ap, err := egress.ResolvePeer(ctx, r, peers[i].Target)
		if err != nil {
			return fmt.Errorf("peer %q: cannot resolve its target %s at start (%w): start the service it names before serve, or give the target as an address", peers[i].Name, peers[i].Target, err)
		}
		peers[i].Dial = ap
	}
	return nil
}

// placePeers gives each peer 127.0.0.1:PORT, or the next 127.0.0.N when that
// port is reserved for the proxies or already given to another peer. The
// sandbox's network namespace is new and empty, so the plan is made before
// the sandbox exists: the hosts file that names the peers is part of it.
func placePeers(peers []Peer) ([]placedPeer, error) {
	taken := map[netip.AddrPort]bool{
		netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", agentProxyPort)):   true,
		netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", visitorProxyPort)): true,
	}
	names := map[string]bool{}
	out := make([]placedPeer, 0, len(peers))
	for _, p := range peers {
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Errorf("peer %s: port %d is not a TCP port (1-65535)", p.Name, p.Port)
		}
		if p.Name == "" || names[strings.ToLower(p.Name)] {
			return nil, fmt.Errorf("peer %q: each peer needs a unique name", p.Name)
		}
		names[strings.ToLower(p.Name)] = true
		if p.Target == "" {
			p.Target = fmt.Sprintf("127.0.0.1:%d", p.Port)
		}
		var ap netip.AddrPort
		for n := 1; n < 255; n++ {
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}), uint16(p.Port))
			if !taken[ap] {
				break
			}
		}
		taken[ap] = true
		out = append(out, placedPeer{Peer: p, Addr: ap})
	}
	return out, nil
}

// maxHostsFile bounds how much of the substrate's /etc/hosts the sandbox's
// copy takes.
const maxHostsFile = 16 << 20

// hostsFile is the substrate's hosts file plus one line per peer: added to,
// never replacing it (docs/failures.md#peers-listed-one-by-one).
func hostsFile(peers []placedPeer) ([]byte, error) {
	var b strings.Builder
	if err := imagefile.Lines("/etc/hosts", maxHostsFile, func(line string) {
		b.WriteString(line)
		b.WriteByte('\n')
	}); err != nil {
		return nil, err
	}
	for _, p := range peers {
		fmt.Fprintf(&b, "%s\t%s\n", p.Addr.Addr(), p.Name)
	}
	return []byte(b.String()), nil
}

// agentFiles are the files only the agent's view gets: the hosts file with
// the peers and an apt proxy configuration. Both are data binds, never
// written into the shared filesystem, which the verifier also sees.
func agentFiles(net Network, peers []placedPeer) ([]bwrap.DataFile, error) {
	var files []bwrap.DataFile
	if len(peers) > 0 {
		hosts, err := hostsFile(peers)
		if err != nil {
			return nil, err
		}
		files = append(files, bwrap.DataFile{Path: "/etc/hosts", Data: hosts})
	}
	if net.Agent.Mode != egress.NoNetwork {
		if st, err := os.Stat("/etc/apt/apt.conf.d"); err == nil && st.IsDir() {
			conf, err := egress.AptProxyConfig(agentProxyURL())
			if err != nil {
				return nil, err
			}
			files = append(files, bwrap.DataFile{Path: "/etc/apt/apt.conf.d/00proxy", Data: conf, ReadOnly: true})
		}
	}
	return files, nil
}

func agentProxyURL() string { return fmt.Sprintf("http://127.0.0.1:%d", agentProxyPort) }

// egressRuntime is the network side of a running sandbox.
type egressRuntime struct {
	agentEnv []string
	visitor  *egress.Visitor
	peers    []placedPeer
	audit    *egress.Audit
	wg       sync.WaitGroup
}

// startEgress makes the listeners inside the sandbox — before any session can
// start, so the first connection is never refused
// (docs/failures.md#listeners-ready-before-the-first-session) — and serves
// them from the substrate until ctx ends.
func (d *Daemon) startEgress(ctx context.Context, peers []placedPeer) (*egressRuntime, error) {
	rt := &egressRuntime{peers: peers}
	audit, err := egress.OpenAudit(d.harnessPath("audit"), 16<<20, 4)
	if err != nil {
		return nil, err
	}
	rt.audit = audit
	// Undone in reverse if a step below fails; once the proxies serve,
	// they close their listeners when ctx ends, and close waits for them.
	cu := cleanup.Make(func() { audit.Close() })
	defer cu.Clean()
	own, err := d.ownAddrs()
	if err != nil {
		d.log.Warn("list the daemon's own addresses", "err", err)
	}
	resolver := d.cfg.Resolver
	if resolver == nil {
		// Read now, before any agent code runs: the agent's root can rewrite
		// the shared /etc/hosts and /etc/resolv.conf later.
		snap, err := egress.NewSnapshotResolver("/etc/hosts", "/etc/resolv.conf")
		if err != nil {
			return nil, err
		}
		resolver = snap
	}
	if err := resolvePeers(ctx, resolver, peers); err != nil {
		return nil, err
	}
	template := egress.Proxy{
		Resolver: resolver,
		Audit:    audit,
		Log:      d.log,
		Own:      own,
	}

	var want []netip.AddrPort
	agentOn := d.cfg.Network.Agent.Mode != egress.NoNetwork
	if agentOn {
		want = append(want, netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", agentProxyPort)))
	}
	want = append(want, netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", visitorProxyPort)))
	for _, p := range peers {
		want = append(want, p.Addr)
	}
	lns, errs, err := d.target.Listen(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("make listeners inside the sandbox: %w", err)
	}
	for _, ln := range lns {
		if ln != nil {
			cu.Add(func() { ln.Close() })
		}
	}
	for i, e := range errs {
		if e != nil {
			return nil, fmt.Errorf("listen on %s inside the sandbox: %w", want[i], e)
		}
	}
	cu.Release()
	serve := func(name string, fn func() error) {
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			if err := fn(); err != nil && ctx.Err() == nil {
				d.log.Error("egress listener stopped", "listener", name, "err", err)
			}
		}()
	}
	i := 0
	if agentOn {
		p := template
		p.Policy = d.cfg.Network.Agent
		p.Label = "agent"
		ln := lns[i]
		serve("agent proxy", func() error { return p.Serve(ctx, ln) })
		i++
		var named []egress.Peer
		for _, pp := range peers {
			named = append(named, egress.Peer{Name: pp.Name, Addr: pp.Addr.Addr()})
		}
		rt.agentEnv = egress.ProxyEnv(agentProxyURL(), named)
	}
	visitorTemplate := template
	visitorTemplate.Label = "visitor"
	rt.visitor = &egress.Visitor{Proxy: visitorTemplate}
	vln := lns[i]
	serve("visitor proxy", func() error { return rt.visitor.Serve(ctx, vln) })
	i++
	for _, p := range peers {
		ln, target := lns[i], p.Dial
		i++
		serve("peer "+p.Name, func() error { return egress.ServePeer(ctx, ln, target, nil) })
		d.log.Info("peer offered", "name", p.Name, "inside", p.Addr.String(), "target", p.Target, "dials", target.String())
	}
	d.log.Info("network ready", "agent", string(d.cfg.Network.Agent.Mode), "verifier", string(d.cfg.Network.Verifier.Mode), "peers", len(peers))
	return rt, nil
}

// ownAddrs are the substrate's addresses that no proxy may reach, less those
// the operator opened deliberately with --egress-allow-cidr (tests open
// loopback for their upstreams).
func (d *Daemon) ownAddrs() ([]netip.Addr, error) {
	all, err := egress.LocalAddrs()
	opened := append(append([]netip.Prefix{}, d.cfg.Network.Agent.AllowCIDRs...), d.cfg.Network.Verifier.AllowCIDRs...)
	var out []netip.Addr
	for _, a := range all {
		deliberate := false
		for _, p := range opened {
			if p.Contains(a) {
				deliberate = true
			}
		}
		if !deliberate {
			out = append(out, a)
		}
	}
	return out, err
}

// openVisit opens the visitor port for one visit under policy and returns the
// environment that points the visit's programs at it.
func (rt *egressRuntime) openVisit(policy egress.Policy) (env []string, done func()) {
	if policy.Mode == egress.NoNetwork {
		return nil, func() {}
	}
	token, done := rt.visitor.Open(policy)
	var named []egress.Peer
	for _, pp := range rt.peers {
		named = append(named, egress.Peer{Name: pp.Name, Addr: pp.Addr.Addr()})
	}
	return egress.ProxyEnv(egress.VisitorURL(fmt.Sprintf("127.0.0.1:%d", visitorProxyPort), token), named), done
}

func (rt *egressRuntime) close() {
	rt.wg.Wait()
	rt.audit.Close()
}
