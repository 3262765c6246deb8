package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/cleanup"
	"github.com/sandboxd/sandboxd/internal/imagefile"
	"github.com/sandboxd/sandboxd/pkg/netrules"
)

// Fixed ports inside the sandbox's network namespace.
const (
	AgentProxyPort   = 3128
	VisitorProxyPort = 3129
)

// PeerSpec is a substrate service offered inside the sandbox under a name,
// as a task (or serve's --peer) declares it.
type PeerSpec struct {
	Name   string
	Port   int
	Target string // host:port on the substrate; "" is 127.0.0.1:Port
}

// Network is a sandbox's network declaration for both phases.
type Network struct {
	Agent    Policy
	Verifier Policy
	Peers    []PeerSpec
	// ProxyEnv points the agent's programs at the explicit proxy (the
	// proxy variables and an apt configuration), as before every
	// connection was caught; off, the agent's environment is Docker's.
	ProxyEnv bool
}

// File is a file of the agent's view alone, bound into it from memory.
type File struct {
	Path     string
	Data     []byte
	ReadOnly bool
}

// Wiring is the network side of one sandbox, from the plan made before the
// sandbox exists to its end: where each peer is offered inside, the files
// that point the agent's programs at the peers and the proxy, the
// listeners inside the sandbox and what serves them from the substrate,
// and the visits to the visitor port.
type Wiring struct {
	net      Network
	peers    []placedPeer
	hosts    []byte // the substrate's hosts file with the peers; nil without peers
	files    []File
	agentEnv []string

	visitor  *Visitor
	audit    *Audit
	answers  *Answers
	attr     *attributor
	proxyEnv bool   // ProxyEnv, or names would not resolve without the proxy
	degraded string // why connections are not caught, when allowed to go on without
	wg       sync.WaitGroup
}

// placedPeer is a peer with the loopback address it got inside the sandbox
// and the address its target resolved to at start.
type placedPeer struct {
	PeerSpec
	Addr netip.AddrPort
	Dial netip.AddrPort // set by Start; every connection goes there
}

// Plan places the peers and makes the agent's network files. The
// sandbox's network namespace is new and empty, so the plan is made before
// the sandbox exists: the hosts file that names the peers is part of it.
func Plan(n Network) (*Wiring, error) {
	w := &Wiring{net: n, attr: &attributor{}}
	var err error
	if w.peers, err = placePeers(n.Peers); err != nil {
		return nil, err
	}
	if len(w.peers) > 0 {
		if w.hosts, err = hostsFile(w.peers); err != nil {
			return nil, err
		}
		// Added to, never replacing, the substrate's entries.
		w.files = append(w.files, File{Path: "/etc/hosts", Data: w.hosts})
	}
	if resolverServed {
		// The sandbox's own resolver, in every mode.
		f, err := resolvConfFile()
		if err != nil {
			return nil, err
		}
		w.files = append(w.files, f)
	}
	w.proxyEnv = n.ProxyEnv || !resolverServed
	if n.Agent.Mode != NoNetwork && w.proxyEnv {
		if st, err := os.Stat("/etc/apt/apt.conf.d"); err == nil && st.IsDir() {
			conf, err := AptProxyConfig(agentProxyURL())
			if err != nil {
				return nil, err
			}
			w.files = append(w.files, File{Path: "/etc/apt/apt.conf.d/00proxy", Data: conf, ReadOnly: true})
		}
		w.agentEnv = ProxyEnv(agentProxyURL(), w.named())
	}
	return w, nil
}

// resolverServed says that the sandbox has a resolver of its own (Start
// serves it when given ListenPacket, as the daemon does): without one,
// names outside the hosts file resolve only through the proxy, and the
// proxy variables are set whatever ProxyEnv says.
var resolverServed = true

// placePeers gives each peer 127.0.0.1:PORT, or the next 127.0.0.N when that
// port is reserved for the proxies or already given to another peer.
func placePeers(peers []PeerSpec) ([]placedPeer, error) {
	taken := map[netip.AddrPort]bool{
		sandboxAddr(AgentProxyPort):   true,
		sandboxAddr(VisitorProxyPort): true,
		sandboxAddr(CatchPort):        true,
		ResolverAddr:                  true,
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
		out = append(out, placedPeer{PeerSpec: p, Addr: ap})
	}
	return out, nil
}

// sandboxAddr is 127.0.0.1:port, inside the sandbox.
func sandboxAddr(port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
}

func agentProxyURL() string { return fmt.Sprintf("http://127.0.0.1:%d", AgentProxyPort) }

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

// named are the peers as ProxyEnv lists them.
func (w *Wiring) named() []Peer {
	var named []Peer
	for _, p := range w.peers {
		named = append(named, Peer{Name: p.Name, Addr: p.Addr.Addr()})
	}
	return named
}

// AgentFiles are the files of the agent's view alone: the hosts file with
// the peers and an apt proxy configuration. They are for data binds, never
// to be written into the shared filesystem, which the verifier also sees.
func (w *Wiring) AgentFiles() []File { return w.files }

// Hosts is the substrate's hosts file with the peers, for the visitors'
// views (the verifier, the healthcheck), so that they resolve the names
// the agent does; nil without peers.
func (w *Wiring) Hosts() []byte { return w.hosts }

// AgentEnv is the environment that points an agent session's programs at
// the agent's proxy: nil under no-network, and unless ProxyEnv was asked
// for or connections cannot be caught (Degraded).
func (w *Wiring) AgentEnv() []string {
	if w.degraded != "" && w.agentEnv == nil && w.net.Agent.Mode != NoNetwork {
		return ProxyEnv(agentProxyURL(), w.named())
	}
	return w.agentEnv
}

// Degraded says why outbound connections are not caught, after a start
// that was allowed to go on without (StartConfig.AllowDegraded); "" when
// they are.
func (w *Wiring) Degraded() string { return w.degraded }

// samePolicy reports whether a and b judge every connection alike.
func samePolicy(a, b Policy) bool {
	return a.Mode == b.Mode && slices.Equal(a.AllowedHosts, b.AllowedHosts) && slices.Equal(a.AllowCIDRs, b.AllowCIDRs)
}

// Answers is the table of addresses answered for names, which the
// sandbox's resolver fills and the transparent listener judges by.
func (w *Wiring) Answers() *Answers { return w.answers }

// Peers are the peers as `sandboxd status` lists them: name=inside->target.
func (w *Wiring) Peers() []string {
	var out []string
	for _, p := range w.peers {
		out = append(out, fmt.Sprintf("%s=%s->%s", p.Name, p.Addr, p.Target))
	}
	return out
}

// StartConfig is what Start needs from the daemon.
type StartConfig struct {
	// Listen makes TCP listeners inside the sandbox's network namespace,
	// one per address, as join.Target.Listen does.
	Listen   func(ctx context.Context, addrs []netip.AddrPort) ([]net.Listener, []error, error)
	AuditDir string
	// Resolver resolves the names the proxies are asked for and the
	// peers' targets; nil is a snapshot of the substrate's /etc/hosts and
	// /etc/resolv.conf, taken by Start.
	Resolver Resolver
	// ResolveWait bounds the wait for the peers' targets to resolve: a
	// compose service may join the network a moment after this container.
	ResolveWait time.Duration
	// Upstream is the substrate's own proxy (UpstreamFromEnv); nil: names
	// are dialled directly.
	Upstream *Upstream
	// Catch installs the rules that send every outbound TCP connection to
	// the transparent listener (netrules.Apply on the sandbox). nil: no
	// connection is caught, and no listener is made for them.
	Catch func(ctx context.Context, plan netrules.Plan) error
	// AddAnswered adds addresses to the rules' answered set
	// (netrules.Rules.AddAnswered); with it, where no phase is
	// public, a connection to an address never answered for a name is
	// refused before the handshake. nil: such connections are reset by
	// the listener instead, after it.
	AddAnswered func(ctx context.Context, addrs []netip.Addr) error
	// ListenPacket makes UDP sockets inside the sandbox's network
	// namespace (join.Target.ListenPacket), for the resolver; nil: the
	// sandbox has no resolver of its own.
	ListenPacket func(ctx context.Context, addrs []netip.AddrPort) ([]net.PacketConn, []error, error)
	// Netlink opens a netlink socket of a protocol inside the sandbox's
	// network namespace (join.Target.Netlink): sock_diag, by which a
	// visit's connections and queries are told from the agent's, and the
	// rules' log of rejected packets, for the audit. nil: every caught
	// connection is judged by the agent's policy, and rejected packets are
	// not audited.
	Netlink func(ctx context.Context, proto int) (*os.File, error)
	// AllowDegraded lets Start go on when the rules cannot be installed:
	// the explicit proxy alone then, with its variables, and Degraded says
	// why. Otherwise such a start fails.
	AllowDegraded bool
	Log           *slog.Logger
}

// Start makes the listeners inside the sandbox — before any session can
// start, so the first connection is never refused
// (docs/failures.md#listeners-ready-before-the-first-session) — and serves
// them from the substrate until ctx ends; Close waits for them. Call it
// before any agent code runs: the resolver it snapshots and the peers'
// targets it resolves must not come from files the agent's root rewrote.
// What it made is undone when it fails.
func (w *Wiring) Start(ctx context.Context, c StartConfig) error {
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	audit, err := OpenAudit(c.AuditDir, 16<<20, 4)
	if err != nil {
		return err
	}
	// Undone in reverse if a step below fails; once the proxies serve,
	// they close their listeners when ctx ends, and Close waits for them.
	cu := cleanup.Make(func() { audit.Close() })
	defer cu.Clean()
	own, err := w.ownAddrs()
	if err != nil {
		log.Warn("list the daemon's own addresses", "err", err)
	}
	resolver := c.Resolver
	if resolver == nil {
		snap, err := NewSnapshotResolver("/etc/hosts", "/etc/resolv.conf")
		if err != nil {
			return err
		}
		resolver = snap
	}
	if err := w.resolvePeers(ctx, resolver, c.ResolveWait); err != nil {
		return err
	}
	template := Proxy{Resolver: resolver, Audit: audit, Log: log, Own: own, Upstream: c.Upstream}

	// Every TCP listener inside, made at once, each in its slot.
	var want []netip.AddrPort
	slot := func(ap netip.AddrPort) int { want = append(want, ap); return len(want) - 1 }
	agentOn := w.net.Agent.Mode != NoNetwork
	agentSlot := -1
	if agentOn {
		agentSlot = slot(sandboxAddr(AgentProxyPort))
	}
	visitorSlot := slot(sandboxAddr(VisitorProxyPort))
	// Caught connections exist whenever either phase may reach the
	// network: the agent's no-network must not take away what a networked
	// verifier needs.
	catching := c.Catch != nil && (agentOn || w.net.Verifier.Mode != NoNetwork)
	catchSlot, dnsSlot := -1, -1
	if catching {
		catchSlot = slot(sandboxAddr(CatchPort))
	}
	// The resolver answers in every mode (REFUSED under no-network, at
	// once, where the substrate's server would be unreachable).
	resolving := c.ListenPacket != nil
	if resolving {
		dnsSlot = slot(ResolverAddr)
	}
	peerSlot := len(want)
	for _, p := range w.peers {
		slot(p.Addr)
	}
	lns, errs, err := c.Listen(ctx, want)
	if err != nil {
		return fmt.Errorf("make listeners inside the sandbox: %w", err)
	}
	for _, ln := range lns {
		if ln != nil {
			cu.Add(func() { ln.Close() })
		}
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("listen on %s inside the sandbox: %w", want[i], e)
		}
	}
	var dnsUDP net.PacketConn
	if resolving {
		pcs, errs, err := c.ListenPacket(ctx, []netip.AddrPort{ResolverAddr})
		if err != nil {
			return fmt.Errorf("make the resolver's UDP socket inside the sandbox: %w", err)
		}
		if errs[0] != nil {
			return fmt.Errorf("listen on %s/udp inside the sandbox: %w", ResolverAddr, errs[0])
		}
		dnsUDP = pcs[0]
		cu.Add(func() { dnsUDP.Close() })
	}
	if (catching || resolving) && c.Netlink != nil {
		// A visit's connections and queries are told from the agent's
		// through this socket (attribute.go).
		if f, err := c.Netlink(ctx, unix.NETLINK_SOCK_DIAG); err != nil {
			// Without it a visit's connections and queries are judged by
			// the agent's policy: the verifier's own, where it differs,
			// would not be the one enforced.
			if !samePolicy(w.net.Agent, w.net.Verifier) && !c.AllowDegraded {
				return fmt.Errorf("open sock_diag inside the sandbox: %w: the verifier's network policy differs from the agent's, and its connections could not be told from the agent's; run serve where netlink works in a user namespace, or pass --allow-degraded to judge them by the agent's policy", err)
			}
			log.Warn("caught connections cannot be attributed to visits: the verifier's are judged by the agent's policy", "err", err)
		} else {
			tv := unix.Timeval{Sec: 1}
			unix.SetsockoptTimeval(int(f.Fd()), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			w.attr.diag = f
			cu.Add(func() { f.Close() })
		}
	}
	w.answers = NewAnswers(0)
	var catchLn net.Listener
	var rejectLog *os.File
	if catching {
		catchLn = lns[catchSlot]
		own, _ := LocalAddrs()
		plan := netrules.Plan{Catch: sandboxAddr(CatchPort), Own: own, Refused: refusedRanges(w.net.Agent, w.net.Verifier)}
		if resolving {
			plan.DNS = ResolverAddr
		}
		plan.Answered = c.AddAnswered != nil && w.net.Agent.Mode != Public && w.net.Verifier.Mode != Public
		if c.Netlink != nil {
			if f, err := c.Netlink(ctx, unix.NETLINK_NETFILTER); err != nil {
				log.Warn("rejected packets cannot be audited", "err", err)
			} else {
				rejectLog = f
				cu.Add(func() { f.Close() })
				plan.LogGroup = rejectLogGroup
			}
		}
		err := c.Catch(ctx, plan)
		if err != nil && !c.AllowDegraded {
			return fmt.Errorf("%w: serve refuses to give the sandbox a network it does not judge; run it where nf_tables works in a user namespace (docs/container-flags.md), or pass --allow-degraded for the explicit proxy alone", err)
		}
		if err != nil {
			w.degraded = "outbound connections are not caught (" + err.Error() + "): only the explicit proxy, with its variables"
			log.Warn("sandbox degraded", "why", w.degraded)
			catchLn.Close()
			catchLn = nil
			if rejectLog != nil {
				rejectLog.Close()
				rejectLog = nil
			}
		} else if plan.Answered {
			ar := &answeredRules{pols: []Policy{w.net.Agent, w.net.Verifier}, add: c.AddAnswered, ctx: ctx, log: log, sent: map[netip.Addr]bool{}}
			w.answers.recorded = ar.recorded
		}
	}
	cu.Release()
	w.audit = audit
	if f := w.attr.diag; f != nil {
		context.AfterFunc(ctx, func() { f.Close() })
	}
	serve := func(name string, fn func() error) {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := fn(); err != nil && ctx.Err() == nil {
				log.Error("egress listener stopped", "listener", name, "err", err)
			}
		}()
	}
	if agentOn {
		p := template
		p.Policy = w.net.Agent
		p.Label = "agent"
		ln := lns[agentSlot]
		serve("agent proxy", func() error { return p.Serve(ctx, ln) })
	}
	visitor := template
	visitor.Label = "visitor"
	w.visitor = &Visitor{Proxy: visitor}
	vln := lns[visitorSlot]
	serve("visitor proxy", func() error { return w.visitor.Serve(ctx, vln) })
	if catchLn != nil {
		k := &Catcher{Proxy: template, Answers: w.answers, Visit: w.attr.attribute}
		k.Proxy.Policy = w.net.Agent
		k.Proxy.Label = "agent"
		serve("transparent listener", func() error { return k.Serve(ctx, catchLn) })
	}
	if catchLn != nil && rejectLog != nil {
		limit := &auditLimit{}
		serve("rejected-packet log", func() error {
			return netrules.ReadRejected(ctx, rejectLog, rejectLogGroup, func(r netrules.Rejected) {
				if limit.allow(time.Now()) {
					audit.record(event{kind: "decision", label: "caught", client: r.Src.String(), method: protoName(r.Proto),
						addr: r.Dst, port: r.Dst.Port(), verdict: "deny", reason: "rejected: only TCP and DNS leave the sandbox"})
				}
			})
		})
	}
	if resolving {
		dns := w.resolverServer(resolver, audit, log, w.attr.queryPolicy)
		dnsTCP := lns[dnsSlot]
		serve("resolver", func() error { return dns.Serve(ctx, dnsUDP, dnsTCP) })
	}
	lns = lns[peerSlot:]
	for i, p := range w.peers {
		ln, target := lns[i], p.Dial
		serve("peer "+p.Name, func() error { return ServePeer(ctx, ln, target, nil) })
		log.Info("peer offered", "name", p.Name, "inside", p.Addr.String(), "target", p.Target, "dials", target.String())
	}
	log.Info("network ready", "agent", string(w.net.Agent.Mode), "verifier", string(w.net.Verifier.Mode), "peers", len(w.peers))
	return nil
}

// resolvePeers resolves each peer's target once, with the resolver taken at
// start, before any agent code runs. Resolving at each connection would read
// the shared /etc/hosts, which the agent's root can rewrite (or swap with a
// new /etc) to lead its peer to any substrate service on loopback, even
// under no-network. A target that does not resolve fails the start.
func (w *Wiring) resolvePeers(ctx context.Context, r Resolver, wait time.Duration) error {
	if wait <= 0 {
		wait = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for i := range w.peers {
		ap, err := ResolvePeer(ctx, r, w.peers[i].Target)
		if err != nil {
			return fmt.Errorf("peer %q: cannot resolve its target %s at start (%w): start the service it names before serve, or give the target as an address", w.peers[i].Name, w.peers[i].Target, err)
		}
		w.peers[i].Dial = ap
	}
	return nil
}

// ownAddrs are the substrate's addresses that no proxy may reach, less those
// the operator opened deliberately with --egress-allow-cidr (tests open
// loopback for their upstreams).
func (w *Wiring) ownAddrs() ([]netip.Addr, error) {
	all, err := LocalAddrs()
	opened := append(append([]netip.Prefix{}, w.net.Agent.AllowCIDRs...), w.net.Verifier.AllowCIDRs...)
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

// OpenVisit opens the visitor port for one visit under policy and returns
// the environment that points the visit's programs at it, and the function
// that ends the visit. Under no-network nothing is opened and no variable
// is set. Its caught connections are the agent's: a visit whose process is
// known takes OpenAttributedVisit. It is for a started Wiring.
func (w *Wiring) OpenVisit(policy Policy) (env []string, done func()) {
	if policy.Mode == NoNetwork {
		return nil, func() {}
	}
	token, done := w.visitor.Open(policy)
	return ProxyEnv(VisitorURL(sandboxAddr(VisitorProxyPort).String(), token), w.named()), done
}

// OpenAttributedVisit is OpenVisit for a visit whose process is known once
// it runs: told its pid with started, the attributor judges the visit's
// caught connections by policy (under no-network too), not by the
// agent's. Where they can be told apart, the visit gets no proxy variable
// (unless ProxyEnv), as under Docker; the port still answers clients
// configured for it.
func (w *Wiring) OpenAttributedVisit(policy Policy) (env []string, started func(pid int), done func()) {
	ctx, cancel := context.WithCancel(context.Background())
	started, forget := w.attr.open(policy, ctx)
	end := func() { forget(); cancel() }
	if policy.Mode == NoNetwork {
		return nil, started, end
	}
	token, closeVisit := w.visitor.Open(policy)
	if !w.proxyEnv && w.degraded == "" && w.attr.diag != nil {
		env = nil
	} else {
		env = ProxyEnv(VisitorURL(sandboxAddr(VisitorProxyPort).String(), token), w.named())
	}
	return env, started, func() { end(); closeVisit() }
}

// Close waits for the listeners, which end with Start's context, and
// closes the audit.
func (w *Wiring) Close() {
	w.wg.Wait()
	if w.audit != nil {
		w.audit.Close()
	}
}
