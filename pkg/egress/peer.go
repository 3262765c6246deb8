package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
)

// maxPeerConns bounds the connections one peer listener carries at once.
const maxPeerConns = 1024

// ServePeer offers a substrate service inside the sandbox: every connection
// accepted on ln (a listener in the sandbox's namespace) is spliced to target
// on the substrate, each direction half-closed on its own EOF (lesson 38).
// Peer connections have no idle timeout: a database session may sit quiet
// for hours. dial nil uses a net.Dialer. It closes ln and every connection
// when ctx ends, and returns nil then.
func ServePeer(ctx context.Context, ln net.Listener, target string, dial DialFunc) error {
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
			slog.Warn("egress: peer connection limit reached", "target", target, "limit", maxPeerConns)
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer c.Close()
			dctx, dcancel := context.WithTimeout(ctx, DefaultDialTimeout)
			up, err := dial(dctx, "tcp", target)
			dcancel()
			if err != nil {
				slog.Info("egress: peer unreachable", "target", target, "client", c.RemoteAddr(), "err", err)
				return
			}
			relay(ctx, c, up, 0)
		}()
	}
}
