package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// packetServer is an x/crypto/ssh server on loopback, behind newServerConn
// as serveConn uses it, whose one session channel answers each 4-byte
// request n with n bytes of channel data, written in one call, and then
// writes nothing until the next request.
type packetServer struct {
	addr string
	key  ssh.Signer
}

func startPacketServer(t *testing.T) *packetServer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				_, _, chans, reqs, err := newServerConn(nc, cfg)
				if err != nil {
					return
				}
				go ssh.DiscardRequests(reqs)
				for nch := range chans {
					ch, creqs, err := nch.Accept()
					if err != nil {
						return
					}
					go ssh.DiscardRequests(creqs)
					go answerSizes(ch)
				}
			}()
		}
	}()
	return &packetServer{addr: ln.Addr().String(), key: signer}
}

func answerSizes(ch ssh.Channel) {
	defer ch.Close()
	var req [4]byte
	for {
		if _, err := io.ReadFull(ch, req[:]); err != nil {
			return
		}
		if _, err := ch.Write(make([]byte, binary.BigEndian.Uint32(req[:]))); err != nil {
			return
		}
	}
}

// clientConn counts the client's writes, each one write(2) on its TCP
// connection, so that the server's can be told from them.
type clientConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *clientConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// channel dials ps with the given cipher (and MAC) and opens the session.
func (ps *packetServer) channel(t *testing.T, cipher, mac string) (*clientConn, ssh.Channel) {
	t.Helper()
	tc, err := net.Dial("tcp", ps.addr)
	require.NoError(t, err)
	nc := &clientConn{Conn: tc}
	t.Cleanup(func() { nc.Close() })
	cfg := &ssh.ClientConfig{User: "agent", HostKeyCallback: ssh.FixedHostKey(ps.key.PublicKey())}
	cfg.Ciphers = []string{cipher}
	if mac != "" {
		cfg.MACs = []string{mac}
	}
	c, chans, reqs, err := ssh.NewClientConn(nc, ps.addr, cfg)
	require.NoError(t, err)
	client := ssh.NewClient(c, chans, reqs)
	ch, creqs, err := client.OpenChannel("session", nil)
	require.NoError(t, err)
	go ssh.DiscardRequests(creqs)
	return nc, ch
}

// ask has the server send n bytes and reads exactly those.
func ask(ch ssh.Channel, n int) error {
	var req [4]byte
	binary.BigEndian.PutUint32(req[:], uint32(n))
	if _, err := ch.Write(req[:]); err != nil {
		return err
	}
	got, err := io.CopyN(io.Discard, ch, int64(n))
	if err != nil {
		return fmt.Errorf("%d of %d bytes: %w", got, n, err)
	}
	return nil
}

// TestPacketConnNeverHoldsAPacketEnd: whatever the cipher, every packet is
// delivered whole while the server has nothing more to send. The sizes
// straddle the transport's 4096-byte buffer and twice it, so that among them
// are packets of exactly 4096 bytes under CTR with HMAC-SHA2-256 (the case a
// wrapper holding every 4096-byte write would stall) and GCM packets whose
// first flush is held. A held packet end would leave the client waiting for
// bytes that never come: the read deadline fails the test.
func TestPacketConnNeverHoldsAPacketEnd(t *testing.T) {
	ps := startPacketServer(t)
	for _, tc := range []struct{ cipher, mac string }{
		{ssh.CipherAES128GCM, ""},
		{ssh.CipherAES256GCM, ""},
		{ssh.CipherChaCha20Poly1305, ""},
		{ssh.CipherAES128CTR, ssh.HMACSHA256},
		{ssh.CipherAES128CTR, ssh.HMACSHA512},
		{ssh.CipherAES256CTR, ssh.HMACSHA256ETM},
	} {
		t.Run(tc.cipher+"+"+tc.mac, func(t *testing.T) {
			nc, ch := ps.channel(t, tc.cipher, tc.mac)
			// Not a timing bound: only what keeps a stalled packet from
			// hanging the test binary.
			require.NoError(t, nc.SetDeadline(time.Now().Add(time.Minute)))
			var sizes []int
			for n := 3900; n <= 4200; n++ {
				sizes = append(sizes, n)
			}
			for n := 8050; n <= 8250; n++ {
				sizes = append(sizes, n)
			}
			sizes = append(sizes, 1, 16<<10, 32<<10, 100<<10)
			for _, n := range sizes {
				require.NoError(t, ask(ch, n), "%d bytes of channel data", n)
			}
		})
	}
}

// syscw is this process's count of write system calls so far.
func syscw(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no syscw in /proc/self/io")
	return 0
}

// TestPacketConnOneWritePerGCMPacket: under AES-GCM a stream of full
// packets costs one write system call per packet, where x/crypto/ssh's
// transport alone makes two (its 4096-byte buffer flushed, then the rest).
// The count is the whole process's (/proc/self/io) less the client's own
// writes (its window adjustments).
func TestPacketConnOneWritePerGCMPacket(t *testing.T) {
	ps := startPacketServer(t)
	nc, ch := ps.channel(t, ssh.CipherAES128GCM, "")
	require.NoError(t, ask(ch, 1<<20)) // windows open, buffers grown
	const size = 64 << 20
	// x/crypto/ssh's client takes packets of up to 32 KiB of data.
	packets := size / (32 << 10)
	before, client := syscw(t), nc.writes.Load()
	require.NoError(t, ask(ch, size))
	writes := syscw(t) - before - int(nc.writes.Load()-client)
	t.Logf("%d write system calls for %d packets", writes, packets)
	assert.Less(t, writes, packets*5/4, "about one write(2) per packet")
	assert.GreaterOrEqual(t, writes, packets, "every packet is written")
}

// The cork is cleared while the packets' writer is still blocked inside
// together, so that a key exchange that holds the writer up is not held
// back with it (docs/failures.md#a-sessions-end-leaves-in-one-segment).
func TestTogetherNeverHoldsTheCorkWhileBlocked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	nc, err := ln.Accept()
	require.NoError(t, err)
	defer nc.Close()
	raw, err := nc.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	pc := &packetConn{Conn: nc, raw: raw}
	corked := func() int {
		var v int
		var gerr error
		require.NoError(t, raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK) }))
		require.NoError(t, gerr)
		return v
	}
	pc.together(func() {
		require.Equal(t, 1, corked(), "corked while the packets are written")
		// A writer blocked here (behind a key exchange) for as long as it
		// takes: the cork must come off meanwhile.
		require.Eventually(t, func() bool { return corked() == 0 }, 10*time.Second, time.Millisecond,
			"the cork stayed on while its writer was blocked")
	})
	assert.Equal(t, 0, corked(), "uncorked after together")
}
