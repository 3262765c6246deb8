package sshd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// conn is one authenticated SSH connection and everything it owns.
type conn struct {
	s      *Server
	sconn  *ssh.ServerConn
	out    *packetConn // sconn's socket, for packets that leave together
	id     *identity
	log    *slog.Logger
	ctx    context.Context // ends with the connection: harness commands, dials
	cancel context.CancelFunc

	sessions       counter
	forwards       counter
	noMoreSessions atomic.Bool

	mu       sync.Mutex
	tcpConns map[net.Conn]struct{} // forwarded connections, closed when the SSH connection ends
	wg       sync.WaitGroup        // every goroutine of this connection
}

func (s *Server) serveConn(nc net.Conn) {
	// A client that connects and says nothing must not hold a goroutine
	// and a descriptor forever.
	nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	out, sconn, chans, reqs, err := newServerConn(nc, s.sshConfig)
	<-s.handshake
	s.mu.Lock()
	delete(s.pending, nc)
	s.mu.Unlock()
	if err != nil {
		s.log.Debug("ssh handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	id, _ := sconn.Permissions.ExtraData[permIdentity].(*identity)
	if id == nil {
		sconn.Close()
		return
	}
	role := "agent"
	if id.harness {
		role = "harness"
	}
	c := &conn{
		s: s, sconn: sconn, out: out, id: id,
		log:      s.log.With("remote", sconn.RemoteAddr().String(), "key", id.key.Fingerprint(), "role", role),
		sessions: counter{max: int32(s.cfg.MaxSessionsPerConn)},
		forwards: counter{max: int32(s.cfg.MaxForwardsPerConn)},
		tcpConns: map[net.Conn]struct{}{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !s.track(func() { s.conns[c] = struct{}{} }) {
		sconn.Close()
		c.cancel()
		return
	}
	c.log.Info("ssh connection", "login", sconn.User(), "client", string(sconn.ClientVersion()))
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()

	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.globalRequests(reqs)
	}()
	for nch := range chans {
		c.openChannel(nch)
	}
	// The connection is gone: end what it owns.
	c.cancel()
	sconn.Close()
	c.mu.Lock()
	for tc := range c.tcpConns {
		tc.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.log.Info("ssh connection closed")
}

func (c *conn) globalRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		switch req.Type {
		case "keepalive@openssh.com":
			req.Reply(true, nil)
		case "no-more-sessions@openssh.com":
			// OpenSSH's client sends this once it has opened the sessions
			// it needs, so that a hijacked connection cannot open more.
			c.noMoreSessions.Store(true)
			req.Reply(true, nil)
		case "tcpip-forward", "cancel-tcpip-forward", "streamlocal-forward@openssh.com", "cancel-streamlocal-forward@openssh.com":
			c.log.Info("ssh remote forwarding refused: nothing in the sandbox may listen on the substrate's network; use ssh -L instead", "request", req.Type)
			req.Reply(false, nil)
		default:
			c.log.Debug("ssh global request refused", "request", req.Type)
			req.Reply(false, nil)
		}
	}
}

func (c *conn) openChannel(nch ssh.NewChannel) {
	switch nch.ChannelType() {
	case "session":
		if c.noMoreSessions.Load() {
			nch.Reject(ssh.Prohibited, "no more sessions: the client sent no-more-sessions@openssh.com on this connection")
			return
		}
		if !c.sessions.acquire() {
			nch.Reject(ssh.ResourceShortage, fmt.Sprintf("too many sessions on one connection (at most %d at once); open another connection", c.sessions.max))
			return
		}
		if c.s.isClosing() {
			c.sessions.release()
			nch.Reject(ssh.Prohibited, "sandboxd is shutting down")
			return
		}
		ch, reqs, err := nch.Accept()
		if err != nil {
			c.sessions.release()
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.sessions.release()
			c.serveSession(ch, reqs)
		}()
	case "direct-tcpip":
		if c.id.harness {
			nch.Reject(ssh.Prohibited, "a harness key cannot forward ports")
			return
		}
		if c.id.key.NoPortForwarding {
			nch.Reject(ssh.Prohibited, "port forwarding is disabled for this key (no-port-forwarding or restrict)")
			return
		}
		if !c.forwards.acquire() {
			nch.Reject(ssh.ResourceShortage, fmt.Sprintf("too many forwarded connections on one SSH connection (at most %d at once)", c.forwards.max))
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.forwards.release()
			c.forward(nch)
		}()
	default:
		nch.Reject(ssh.UnknownChannelType, fmt.Sprintf("channel type %q is not served by sandboxd (session and direct-tcpip are)", nch.ChannelType()))
	}
}

// addTCP registers a forwarded connection; false if the SSH connection is
// already over.
func (c *conn) addTCP(tc net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return false
	}
	c.tcpConns[tc] = struct{}{}
	return true
}

func (c *conn) removeTCP(tc net.Conn) {
	c.mu.Lock()
	delete(c.tcpConns, tc)
	c.mu.Unlock()
}
