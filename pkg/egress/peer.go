package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// maxPeerConns bounds the connections one peer listener carries at once.
const maxPeerConns = 1024

// peerRetry is how often ResolvePeer asks again for a name not resolved yet.
const peerRetry = 250 * time.Millisecond

// ResolvePeer turns a peer's target (host:port on the substrate) into the one
// address that every connection to the peer is dialled to. The daemon calls
// it once, at start, with its start-time resolver: a name looked up again at
// each connection would be looked up in the hosts file that the agent's root
// can rewrite (it shares /etc with the daemon), and could then lead the
// agent's peer to any substrate service, on loopback too, even under
// no-network. A name that does not resolve yet is asked for again until ctx
// ends: a compose service may join the network a moment after this
// container. The first address wins, in the resolver's order (the hosts
// file's, then IPv4 before IPv6).
func ResolvePeer(ctx context.Context, r Resolver, target string) (netip.AddrPort, error) {
	host, portText, err := net.SplitHostPort(target)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("peer target %q: %w: write host:port", target, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("peer target %q: %q is not a TCP port (1-65535)", target, portText)
	}
	for {
		addrs, err := lookup(ctx, r, DefaultDNSTimeout, host)
		if err == nil {
			return netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), nil
		}
		select {
		case <-ctx.Done():
			return netip.AddrPort{}, err
		case <-time.After(peerRetry):
		}
	}
}

// ServePeer offers a substrate service inside the sandbox: every connection
// accepted on ln (a listener in the sandbox's namespace) is spliced to target
// on the substrate — an address, resolved once by ResolvePeer, never a name —
// each direction half-closed on its own EOF
// (docs/failures.md#relays-close-each-direction-on-its-own). Peer connections
// have no idle timeout: a database session may sit quiet for hours. dial nil
// uses a net.Dialer. It closes ln and every connection when ctx ends, and
// returns nil then.
func ServePeer(ctx context.Context, ln net.Listener, target netip.AddrPort, dial DialFunc) error {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxPeerConns)
	for {
		c, err := accept(ctx, ln, slog.Default())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept for peer %s on %s: %w", target, ln.Addr(), err)
		}
		select {
		case sem <- struct{}{}:
		default:
			slog.Warn("egress: peer connection limit reached", "target", target.String(), "limit", maxPeerConns)
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer c.Close()
			dctx, dcancel := context.WithTimeout(ctx, DefaultDialTimeout)
			up, err := dial(dctx, "tcp", target.String())
			dcancel()
			if err != nil {
				slog.Info("egress: peer unreachable", "target", target.String(), "client", c.RemoteAddr(), "err", err)
				return
			}
			relay(ctx, c, up, 0)
		}()
	}
}
