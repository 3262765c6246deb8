package sshd

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// Answers connects to an SSH listener and reads the server's version line:
// proof that sessions are accepted, not only that a socket is bound (the
// readiness probe, `sandboxd status --ready`).
func Answers(addr net.Addr) error {
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("listener address %v", addr)
	}
	dial := *a
	var c net.Conn
	var err error
	if dial.IP.IsUnspecified() {
		// Go listens on 0.0.0.0 as a dual-stack [::]: IPv4 loopback is
		// the one a container always has (Docker's have no ::1 without
		// IPv6), and the wildcard takes it; ::1 is for an IPv6-only one.
		for _, ip := range []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback} {
			dial.IP = ip
			if c, err = net.DialTimeout("tcp", dial.String(), 2*time.Second); err == nil {
				break
			}
		}
	} else {
		c, err = net.DialTimeout("tcp", dial.String(), 2*time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no version line from %s: %w", dial.String(), err)
	}
	if !strings.HasPrefix(line, "SSH-2.0-") {
		return fmt.Errorf("%s answered %q, not SSH", dial.String(), strings.TrimSpace(line))
	}
	return nil
}
