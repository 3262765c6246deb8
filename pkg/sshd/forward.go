package sshd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
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
		// Each direction closes on its own EOF (lesson 38): a client that
		// sent its whole request still gets the whole answer.
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
// an IP address, localhost, or a name from the sandbox's own /etc/hosts
// (where its peers are listed). No DNS: the daemon's resolver answers for
// the substrate, not for the sandbox.
func (s *Server) resolve(host string) (netip.Addr, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	if host == "" || strings.EqualFold(host, "localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	if a, ok := s.lookupHosts(host); ok {
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("cannot resolve %q inside the sandbox: use an IP address, localhost, or a name from the sandbox's /etc/hosts", host)
}

func (s *Server) lookupHosts(name string) (netip.Addr, bool) {
	f, err := s.openInSandbox("/etc/hosts")
	if err != nil {
		return netip.Addr{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		for _, n := range fields[1:] {
			if strings.EqualFold(n, name) {
				return a.Unmap(), true
			}
		}
	}
	return netip.Addr{}, false
}

// openInSandbox opens path as the sandbox sees it: symlinks resolve inside
// the sandbox's root, never in the substrate's.
func (s *Server) openInSandbox(path string) (*os.File, error) {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", s.cfg.Target.PID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s in the sandbox: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// executableInSandbox reports whether path is an executable regular file in
// the sandbox's view.
func (s *Server) executableInSandbox(path string) bool {
	f, err := s.openInSandbox(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
