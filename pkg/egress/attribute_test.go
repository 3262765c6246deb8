package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// diagHere is an attributor whose sock_diag socket is in this process's
// own network namespace, with one visit open whose pid namespace is this
// process's: every process of it is scanned, the dearest case.
func diagHere(t testing.TB) (*attributor, func()) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	require.NoError(t, err)
	a := &attributor{diag: os.NewFile(uintptr(fd), "sock_diag")}
	started, done := a.open(Policy{Mode: NoNetwork}, context.Background())
	started(os.Getpid())
	return a, func() { done(); a.diag.Close() }
}

// A connection is attributed to the visit whose process holds the client
// socket, found by its address pair; one held by nobody of a visit is not.
func TestAttributionFindsTheSocketsHolder(t *testing.T) {
	a, done := diagHere(t)
	defer done()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	client, dst := clientAddr(c.(*net.TCPConn).LocalAddr()), clientAddr(c.RemoteAddr())
	j, ok := a.attribute(client, dst)
	require.True(t, ok, "this process holds the socket")
	assert.Equal(t, "verifier", j.Label)
	assert.Equal(t, NoNetwork, j.Policy.Mode)
	_, ok = a.attribute(dst, netip.MustParseAddrPort("127.0.0.1:1"))
	assert.False(t, ok, "no socket has that address pair")
}

// BenchmarkAttribution is what attributing one caught connection costs
// while a visit is open: one sock_diag query and a scan of the visit's
// processes' descriptors (here every process in this pid namespace).
func BenchmarkAttribution(b *testing.B) {
	a, done := diagHere(b)
	defer done()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	defer c.Close()
	client, dst := clientAddr(c.(*net.TCPConn).LocalAddr()), clientAddr(c.RemoteAddr())
	b.Run("sock_diag", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.inode(client, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	if os.Geteuid() == 0 {
		// The usual case: a visit of a few processes in a pid namespace
		// of its own; every process is looked at, none holds the socket.
		other := exec.Command("unshare", "--pid", "--fork", "sleep", "60")
		require.NoError(b, other.Start())
		defer func() { other.Process.Kill(); other.Wait() }()
		var pid int
		require.Eventually(b, func() bool {
			kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", other.Process.Pid, other.Process.Pid))
			_, err := fmt.Sscan(string(kids), &pid)
			return err == nil
		}, 5*time.Second, 10*time.Millisecond)
		own := &attributor{diag: a.diag}
		started, done := own.open(Policy{Mode: NoNetwork}, context.Background())
		defer done()
		started(pid)
		b.Run("sock_diag+scan, a visit in a pid namespace of its own", func(b *testing.B) {
			for b.Loop() {
				if _, ok := own.attribute(client, dst); ok {
					b.Fatal("attributed to a visit that does not hold it")
				}
			}
		})
	}
	b.Run("sock_diag+scan, every process a visit's", func(b *testing.B) {
		for b.Loop() {
			if _, ok := a.attribute(client, dst); !ok {
				b.Fatal("not attributed")
			}
		}
	})
}

// An exchange that ended early leaves the rest of its answer on the
// socket; the next one reads only its own answer, by its sequence number,
// never the leftover.
func TestAttributionSkipsALeftoverAnswer(t *testing.T) {
	a, done := diagHere(t)
	defer done()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var conns []net.Conn
	for range 20 { // enough sockets that the dump's answer has many messages
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		conns = append(conns, c)
	}
	// A dump of every TCP socket, abandoned at its first message.
	first := 0
	err = a.exchange(diagRequest(unix.AF_INET, unix.IPPROTO_TCP, unix.NLM_F_REQUEST|unix.NLM_F_DUMP), 32<<10,
		func(m syscall.NetlinkMessage) (bool, error) { first++; return true, nil })
	require.NoError(t, err)
	require.Equal(t, 1, first)
	c := conns[len(conns)-1]
	client, dst := clientAddr(c.(*net.TCPConn).LocalAddr()), clientAddr(c.RemoteAddr())
	got, err := a.inode(client, dst)
	require.NoError(t, err)
	want := socketInode(t, c)
	assert.Equal(t, want, got, "the socket's own inode, not a leftover's")
}

// socketInode is the inode of c's socket, from /proc/self/fd.
func socketInode(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	f, err := c.(*net.TCPConn).File()
	require.NoError(t, err)
	defer f.Close()
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))
	return uint32(st.Ino)
}
