package sandboxtest

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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
//
// The namespace is kept by a process of its own, never by a mount: `ip netns
// add` bind-mounts it under /run/netns, and a mount made or removed there
// while a sandbox of --host starts, in another package's test binary, made
// that sandbox's bwrap fail to remount its copy of / ("Unable to apply mount
// flags"; docs/failures.md#test-hosts-make-no-mount).
type TestHost struct {
	Addr netip.Addr // the host's address
	Side netip.Addr // the substrate's end of the pair
	// keeper is alone in the host's network namespace and keeps it; the
	// namespace is /proc/PID/ns/net of its pid.
	keeper *exec.Cmd
}

var testHosts atomic.Int32

// NewTestHost makes a test host, removed when the test ends. It needs root
// on a bare host (a network namespace and a veth pair).
func NewTestHost(t testing.TB) *TestHost {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{"ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			Need(t, tool+" (apt-get install iproute2 util-linux)")
		}
	}
	n := int(testHosts.Add(1))
	id := fmt.Sprintf("%d-%d", os.Getpid()%10000, n)
	h := &TestHost{
		Addr: netip.AddrFrom4([4]byte{10, 214, byte(os.Getpid() % 200), byte(4*n + 2)}),
		Side: netip.AddrFrom4([4]byte{10, 214, byte(os.Getpid() % 200), byte(4*n + 1)}),
	}
	// The keeper says "ready" once it is in the new namespace, then sleeps
	// until the test ends.
	h.keeper = exec.Command("unshare", "--net", "--", "sh", "-c", "echo ready; exec sleep infinity")
	out, err := h.keeper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, h.keeper.Start())
	t.Cleanup(func() { h.keeper.Process.Kill(); h.keeper.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the namespace's keeper ended before it was ready")
	require.Equal(t, "ready\n", line)
	pid := strconv.Itoa(h.keeper.Process.Pid)

	veth := "sbxh" + id
	run := func(cmd *exec.Cmd) {
		t.Helper()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", strings.Join(cmd.Args, " "), out)
	}
	ip := func(args ...string) { t.Helper(); run(exec.Command("ip", args...)) }
	inHost := func(args ...string) { t.Helper(); run(h.Command("ip", args...)) }
	ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pid)
	t.Cleanup(func() { exec.Command("ip", "link", "del", veth).Run() })
	ip("addr", "add", h.Side.String()+"/30", "dev", veth)
	ip("link", "set", veth, "up")
	inHost("addr", "add", h.Addr.String()+"/30", "dev", "eth0")
	inHost("link", "set", "eth0", "up")
	inHost("link", "set", "lo", "up")
	return h
}

// netns is the path of the host's network namespace.
func (h *TestHost) netns() string { return fmt.Sprintf("/proc/%d/ns/net", h.keeper.Process.Pid) }

// Command is a command that runs in the host's network namespace (a server
// of the host's), and in the substrate's everything else.
func (h *TestHost) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + h.netns(), "--", name}, args...)...)
}

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
		target, err := os.Open(h.netns())
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
