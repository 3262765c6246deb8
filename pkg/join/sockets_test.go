package join_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// netnsOf is the inode of the network namespace a socket was made in.
func netnsOf(t *testing.T, f *os.File) uint64 {
	t.Helper()
	ns, err := unix.IoctlRetInt(int(f.Fd()), unix.SIOCGSKNS)
	require.NoError(t, err)
	defer unix.Close(ns)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(ns, &st))
	return st.Ino
}

// TestSocketsAreMadeInsideTheSandboxsNetwork: the forked copy makes
// listeners, UDP and netlink sockets in the sandbox's network namespace,
// where the sandbox's processes reach them and the substrate's do not, and
// reports a failure per socket without losing the others.
func TestSocketsAreMadeInsideTheSandboxsNetwork(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var holderNet unix.Stat_t
	require.NoError(t, unix.Stat(fmt.Sprintf("/proc/%d/ns/net", sb.Holder.PID), &holderNet))

	tcp := netip.MustParseAddrPort("127.0.0.1:3139")
	udp := netip.MustParseAddrPort("127.0.0.53:53") // below 1024: the copy holds the sandbox's capabilities
	files, errs, err := sb.Target.Sockets(context.Background(), []join.SocketSpec{
		{Kind: join.TCPListener, Addr: tcp},
		{Kind: join.TCPListener, Addr: tcp}, // taken by the first
		{Kind: join.UDPSocket, Addr: udp},
		{Kind: join.NetlinkSocket, Proto: unix.NETLINK_SOCK_DIAG},
		{Kind: join.UDPSocket, Addr: netip.MustParseAddrPort("192.0.2.1:53")}, // no such address inside
	})
	require.NoError(t, err)
	require.Len(t, files, 5)
	for _, i := range []int{0, 2, 3} {
		require.NoError(t, errs[i], "socket %d", i)
		require.NotNil(t, files[i])
		defer files[i].Close()
		assert.Equal(t, holderNet.Ino, netnsOf(t, files[i]), "socket %d is in the sandbox's network namespace", i)
	}
	assert.Nil(t, files[1])
	assert.ErrorIs(t, errs[1], unix.EADDRINUSE)
	assert.ErrorContains(t, errs[1], "bind 127.0.0.1:3139")
	assert.Nil(t, files[4])
	assert.ErrorIs(t, errs[4], unix.EADDRNOTAVAIL)

	ln, err := net.FileListener(files[0])
	require.NoError(t, err)
	defer ln.Close()
	pc, err := net.FilePacketConn(files[2])
	require.NoError(t, err)
	defer pc.Close()

	// The sandbox's processes reach them; the substrate's loopback does not.
	accepted := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- err.Error()
			return
		}
		defer c.Close()
		b := make([]byte, 16)
		n, _ := c.Read(b)
		accepted <- string(b[:n])
	}()
	r := sb.Run(t, "0:0", nil, "/bin/bash", "-c", fmt.Sprintf(`exec 3<>/dev/tcp/%s/%d && printf tcp >&3 && printf udp >/dev/udp/%s/%d`, tcp.Addr(), tcp.Port(), udp.Addr(), udp.Port()))
	require.Equal(t, 0, r.Code, r.Stderr)
	select {
	case got := <-accepted:
		assert.Equal(t, "tcp", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the listener accepted nothing")
	}
	pc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 16)
	n, _, err := pc.ReadFrom(b)
	require.NoError(t, err)
	assert.Equal(t, "udp", string(b[:n]))

	_, err = net.DialTimeout("tcp", tcp.String(), time.Second)
	assert.Error(t, err, "nothing listens on the substrate's loopback")
}

// TestSocketsOfAFinishedSandboxFailClearly.
func TestSocketsOfAFinishedSandboxFailClearly(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	target := sb.Target
	sb.Holder.Kill()
	<-sb.Holder.Done()
	_, _, err := target.Sockets(context.Background(), []join.SocketSpec{{Kind: join.TCPListener, Addr: netip.MustParseAddrPort("127.0.0.1:3139")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "namespace")
}
