package sshd

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/imagefile"
)

// dialTimeout bounds a direct-tcpip connect inside the sandbox.
const dialTimeout = 10 * time.Second

// forward serves one direct-tcpip channel (ssh -L): the connection is made
// from inside the sandbox's network namespace, so a person can reach the
// web page or VNC server the agent started on the sandbox's loopback.
func (c *conn) forward(nch ssh.NewChannel) {
	var p struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nch.ExtraData(), &p); err != nil || p.Port == 0 || p.Port > 65535 {
		nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	addr, err := c.s.resolve(p.Host)
	if err != nil {
		nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	target := netip.AddrPortFrom(addr, uint16(p.Port))
	ctx, cancel := context.WithTimeout(c.ctx, dialTimeout)
	tc, err := c.s.cfg.Target.Dial(ctx, target)
	cancel()
	if err != nil {
		c.log.Info("ssh -L refused", "to", target.String(), "err", err)
		nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	if !c.addTCP(tc) {
		tc.Close()
		nch.Reject(ssh.ConnectionFailed, "the SSH connection is closing")
		return
	}
	defer func() {
		c.removeTCP(tc)
		tc.Close()
	}()
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	c.log.Debug("ssh -L connected", "to", target.String())

	// The channel's requests end when the channel is closed: then the TCP
	// connection goes too, whatever either side was doing.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ssh.DiscardRequests(reqs)
		tc.Close()
	}()
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		// Each direction closes on its own EOF
		// (docs/failures.md#relays-close-each-direction-on-its-own): a client
		// that sent its whole request still gets the whole answer.
		io.Copy(tc, ch)
		if cw, ok := tc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	io.Copy(ch, tc)
	ch.CloseWrite()
	<-upDone
	ch.Close()
	<-closed
}

// resolve turns a direct-tcpip host into an address inside the sandbox:
// an IP address, localhost, or a name of the sandbox's /etc/hosts as it was
// when the server was made (where its peers are listed). No DNS: the
// daemon's resolver answers for the substrate, not for the sandbox. And no
// reading the hosts file now: the agent's root may have made it a FIFO.
func (s *Server) resolve(host string) (netip.Addr, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	if host == "" || strings.EqualFold(host, "localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	if a := s.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]; len(a) > 0 {
		return a[0], nil
	}
	return netip.Addr{}, fmt.Errorf("cannot resolve %q inside the sandbox: use an IP address, localhost, or a name the sandbox's /etc/hosts had when serve started", host)
}

// maxHostsFile bounds how much of the sandbox's /etc/hosts is read.
const maxHostsFile = 1 << 20

// readHosts takes the snapshot of the sandbox's /etc/hosts that ssh -L
// names are resolved from. A hosts file that cannot be read (not a regular
// file, say) names nothing.
func (s *Server) readHosts() map[string][]netip.Addr {
	root, err := s.sandboxRoot()
	if err != nil {
		s.log.Warn("ssh -L will know no names from the sandbox's hosts file", "err", err)
		return nil
	}
	defer root.Close()
	hosts, err := root.Hosts("/etc/hosts", maxHostsFile)
	if err != nil {
		s.log.Warn("ssh -L will know no names from the sandbox's hosts file", "err", err)
	}
	return hosts
}

// sandboxRoot holds the sandbox's root, under which the image's files are
// looked up as the sandbox sees them.
func (s *Server) sandboxRoot() (*imagefile.Root, error) {
	return imagefile.OpenRoot(fmt.Sprintf("/proc/%d/root", s.cfg.Target.PID))
}

// executableInSandbox reports whether path is an executable regular file in
// the sandbox's view. Nothing is opened for reading: a FIFO planted at the
// login shell or the sftp-server is simply not executable.
func (s *Server) executableInSandbox(path string) bool {
	root, err := s.sandboxRoot()
	if err != nil {
		return false
	}
	defer root.Close()
	return root.Executable(path)
}
