package sandboxtest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestHost is a host next to the substrate: a network namespace of the
// test's own, joined to the substrate's by a veth pair, whose address is
// private (10.214.N.2). Caught connections from a sandbox reach it through
// the daemon like any outside host, and nothing else on the network ever
// sees the test's traffic.
type TestHost struct {
	Addr netip.Addr // the host's address
	Side netip.Addr // the substrate's end of the pair
	ns   string
}

var testHosts atomic.Int32

// NewTestHost makes a test host, removed when the test ends. It needs root
// on a bare host (a network namespace and a veth pair).
func NewTestHost(t testing.TB) *TestHost {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		Need(t, "ip (apt-get install iproute2)")
	}
	n := int(testHosts.Add(1))
	id := fmt.Sprintf("%d-%d", os.Getpid()%10000, n)
	h := &TestHost{
		Addr: netip.AddrFrom4([4]byte{10, 214, byte(os.Getpid() % 200), byte(4*n + 2)}),
		Side: netip.AddrFrom4([4]byte{10, 214, byte(os.Getpid() % 200), byte(4*n + 1)}),
		ns:   "sbxhost" + id,
	}
	veth := "sbxh" + id
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("netns", "add", h.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", h.ns).Run() })
	ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", veth).Run() })
	ip("addr", "add", h.Side.String()+"/30", "dev", veth)
	ip("link", "set", veth, "up")
	ip("-n", h.ns, "addr", "add", h.Addr.String()+"/30", "dev", "eth0")
	ip("-n", h.ns, "link", "set", "eth0", "up")
	ip("-n", h.ns, "link", "set", "lo", "up")
	return h
}

// Namespace is the host's network namespace, by the name `ip netns` knows
// it by (to run a server there with `ip netns exec`).
func (h *TestHost) Namespace() string { return h.ns }

// Listen makes a TCP listener on the host at port (0: any).
func (h *TestHost) Listen(t testing.TB, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	h.In(t, func() { ln, err = net.Listen("tcp", netip.AddrPortFrom(h.Addr, uint16(port)).String()) })
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// In runs fn on a thread that has joined the host's network namespace:
// sockets made there stay in it, and are served from any goroutine. fn runs
// on another goroutine than the test's: it must not call require.
func (h *TestHost) In(t testing.TB, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked if it cannot go back: the runtime then ends the
		// thread rather than reuse it in the wrong namespace.
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer own.Close()
		target, err := os.Open("/run/netns/" + h.ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		fn()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	require.NoError(t, <-errc)
}
