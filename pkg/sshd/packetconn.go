package sshd

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// transportBuffer is the size of the bufio.Writer that x/crypto/ssh's
// transport writes every packet through (bufio's default).
const transportBuffer = 4096

// packetConn gives the kernel an AES-GCM packet in one writev(2) where
// x/crypto/ssh would make two write(2) calls. The GCM cipher hands the
// transport's 4 KiB bufio.Writer the 4-byte length and then the sealed
// packet; a packet larger than the buffer thus reaches the socket as a full
// 4096-byte flush and then the rest, which costs a second system call, a
// second TCP push and a second wake-up of the client for every packet of a
// stream (about half the daemon's CPU on a 1 GiB stdout).
//
// A write is held back only when it is certain that the rest of its packet
// follows at once, from the same call of the transport: under AES-GCM a
// 4096-byte write is always such a mid-packet flush, because a GCM packet is
// 4 + 16k + 16 bytes long and so is every packet's last write modulo 16 —
// never a multiple of 4096. Any other cipher (CTR with a MAC can make a
// packet of exactly 4096 bytes; chacha20-poly1305 writes each packet in one
// call already), the key exchange before the first NEWKEYS, and any other
// size pass through untouched, so a keystroke's echo is never delayed.
type packetConn struct {
	net.Conn
	// algs is the connection's negotiated algorithms, set once the first key
	// exchange is done; until then nothing is held.
	algs atomic.Pointer[ssh.AlgorithmsConnMetadata]
	held []byte // a mid-packet flush, written with the rest of its packet
	pair [2][]byte
	raw  syscall.RawConn // the TCP socket, for together; nil on any other kind of connection
}

// newServerConn is ssh.NewServerConn on nc through a packetConn, which it
// also returns.
func newServerConn(nc net.Conn, cfg *ssh.ServerConfig) (*packetConn, *ssh.ServerConn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	pc := &packetConn{Conn: nc, held: make([]byte, 0, transportBuffer)}
	if tc, ok := nc.(*net.TCPConn); ok {
		pc.raw, _ = tc.SyscallConn()
	}
	sconn, chans, reqs, err := ssh.NewServerConn(pc, cfg)
	if err == nil {
		if m, ok := sconn.Conn.(ssh.AlgorithmsConnMetadata); ok {
			pc.negotiated(m)
		}
	}
	return pc, sconn, chans, reqs, err
}

// together hands the kernel the packets that send writes back to back in
// as few TCP segments as it can. A session ends with three packets
// (exit-status, EOF, close) that x/crypto/ssh writes one call each, where
// sshd sends them in one write(2); apart, each is a segment of its own, a
// wake-up of the client's reader and ACKs both ways
// (docs/failures.md#a-sessions-end-leaves-in-one-segment). TCP_CORK holds
// partial frames until it is cleared. A write can block inside send
// (x/crypto/ssh makes writers wait during a key exchange once 64 packets
// are queued), and meanwhile the cork would hold back everything small on
// the connection, the key exchange's own packets included, until the
// kernel's release after max(RTO, 200 ms): so a timer clears it after
// corkAtMost whatever happens. Two sessions ending at once may clear each
// other's cork early, which costs only a segment more.
func (c *packetConn) together(send func()) {
	if c.raw == nil {
		send()
		return
	}
	cork := func(on int) {
		c.raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, on) })
	}
	cork(1)
	release := time.AfterFunc(corkAtMost, func() { cork(0) })
	defer func() {
		if release.Stop() {
			cork(0)
		}
	}()
	send()
}

// corkAtMost bounds how long together keeps the connection corked; the
// three packets take microseconds.
const corkAtMost = 2 * time.Millisecond

// negotiated tells the connection where to read the current cipher from;
// x/crypto/ssh updates it after every key exchange, before the packets the
// exchange queued are written with the new keys.
func (c *packetConn) negotiated(m ssh.AlgorithmsConnMetadata) { c.algs.Store(&m) }

// aesGCM says whether packets now go out sealed with AES-GCM.
func (c *packetConn) aesGCM() bool {
	m := c.algs.Load()
	if m == nil {
		return false
	}
	switch (*m).Algorithms().Write.Cipher {
	case ssh.CipherAES128GCM, ssh.CipherAES256GCM:
		return true
	}
	return false
}

// Write is called by the transport alone, under its write lock, so the held
// bytes need no lock of their own.
func (c *packetConn) Write(p []byte) (int, error) {
	if len(c.held) == 0 {
		if len(p) == transportBuffer && c.aesGCM() {
			c.held = append(c.held, p...)
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	// net.Buffers on a TCP connection is one writev(2).
	c.pair = [2][]byte{c.held, p}
	bufs := net.Buffers(c.pair[:])
	n, err := bufs.WriteTo(c.Conn)
	c.held = c.held[:0]
	// The held bytes were reported written already.
	return max(int(n)-transportBuffer, 0), err
}
