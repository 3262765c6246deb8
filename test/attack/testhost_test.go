package attack

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The test host: a network namespace of the suite's own, joined to the
// substrate by one veth pair. These addresses exist on that pair only.
const (
	hostSide   = "10.213.77.1" // the substrate's end: one of its own addresses
	testHost   = "10.213.77.2" // a private host next to the substrate
	testHost2  = "10.213.77.3" // a second private host, never allowed
	hostSide6  = "fdaa:213:77::1"
	testHost6  = "fdaa:213:77::2"
	testPrefix = "/29"
)

// listener counts what reaches one address the sandbox must not reach
// (or, for the one the proxy may reach, what it did reach).
type listener struct {
	name  string
	addr  string // host:port
	hits  atomic.Int64
	close func()
}

// network is every target the network attempts aim at.
type network struct {
	ns           string
	hostHTTP     *listener // testHost:80, allowed through the proxy in the network rollout
	host2HTTP    *listener // testHost2:80
	host6HTTP    *listener // [testHost6]:80
	hostUDP      *listener // testHost:53/udp
	hostSideTCP  *listener // hostSide:port, the substrate's own veth address
	loopbackTCP  *listener // 127.0.0.1:port on the substrate
	loopback6TCP *listener // [::1]:port on the substrate
	loopbackUDP  *listener // 127.0.0.1:port/udp on the substrate
	abstract     string    // an abstract unix socket in the substrate's network namespace
	abstractHits atomic.Int64
}

func (n *network) all() []*listener {
	return []*listener{n.hostHTTP, n.host2HTTP, n.host6HTTP, n.hostUDP, n.hostSideTCP, n.loopbackTCP, n.loopback6TCP, n.loopbackUDP}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// startNetwork makes the test host and the substrate's own listeners.
func startNetwork(t *testing.T) *network {
	t.Helper()
	requireTools(t, "ip")
	n := &network{}
	if inContainerRun {
		// A default-capability container cannot make a network namespace
		// or a veth pair: the setup made the test host before the suite
		// started (substrate_test.go), and its listeners serve every class.
		adoptTestHost(t, n)
	} else {
		n.ns = fmt.Sprintf("sbxattack%d", os.Getpid())
		veth := fmt.Sprintf("sbxa%d", os.Getpid()%100000)
		removeStaleNetns()
		ipCmd(t, "netns", "add", n.ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n.ns).Run() })
		ipCmd(t, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
		t.Cleanup(func() { exec.Command("ip", "link", "del", veth).Run() })
		ipCmd(t, "addr", "add", hostSide+testPrefix, "dev", veth)
		ipCmd(t, "-6", "addr", "add", hostSide6+"/64", "dev", veth, "nodad")
		ipCmd(t, "link", "set", veth, "up")
		ipCmd(t, "-n", n.ns, "addr", "add", testHost+testPrefix, "dev", "eth0")
		ipCmd(t, "-n", n.ns, "addr", "add", testHost2+testPrefix, "dev", "eth0")
		ipCmd(t, "-n", n.ns, "-6", "addr", "add", testHost6+"/64", "dev", "eth0", "nodad")
		ipCmd(t, "-n", n.ns, "link", "set", "eth0", "up")
		ipCmd(t, "-n", n.ns, "link", "set", "lo", "up")

		inNetns(t, "/run/netns/"+n.ns, func() {
			n.hostHTTP = tcpListener(t, "test host", testHost+":80", "testhost-2\n")
			n.host2HTTP = tcpListener(t, "second test host", testHost2+":80", "testhost-3\n")
			n.host6HTTP = tcpListener(t, "test host (IPv6)", "["+testHost6+"]:80", "testhost-6\n")
			n.hostUDP = udpListener(t, "test host DNS", testHost+":53")
		})
	}
	n.hostSideTCP = tcpListener(t, "substrate veth address", hostSide+":0", "substrate-veth\n")
	n.loopbackTCP = tcpListener(t, "substrate loopback", "127.0.0.1:0", "substrate-loopback\n")
	n.loopback6TCP = tcpListener(t, "substrate loopback (IPv6)", "[::1]:0", "substrate-loopback6\n")
	n.loopbackUDP = udpListener(t, "substrate loopback UDP", "127.0.0.1:0")
	n.abstract = "sandboxd-attack-" + randomHex(6)
	ln, err := net.Listen("unix", "@"+n.abstract)
	require.NoError(t, err)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.abstractHits.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	for _, l := range n.all() {
		t.Cleanup(l.close)
	}
	// The veth needs a moment before the first packet; prove the path from
	// the substrate works, so that a refusal inside means something. The
	// listener counts the accept on its own goroutine: wait for it before
	// starting from zero.
	for _, l := range []*listener{n.hostHTTP, n.host6HTTP} {
		require.Eventually(t, func() bool {
			c, err := net.DialTimeout("tcp", l.addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "%s answers the substrate", l.name)
		require.Eventually(t, func() bool { return l.hits.Load() > 0 }, 5*time.Second, 5*time.Millisecond)
	}
	for _, l := range n.all() {
		l.hits.Store(0)
	}
	return n
}

// removeStaleNetns deletes the test hosts of earlier runs that crashed
// (their names carry the pid of a process that is gone).
func removeStaleNetns() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "sbxattack") {
			continue
		}
		if _, err := os.Stat("/proc/" + strings.TrimPrefix(f[0], "sbxattack")); err == nil && strings.TrimPrefix(f[0], "sbxattack") != fmt.Sprint(os.Getpid()) {
			continue // a run in progress
		}
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// inNetns runs fn on a thread that has joined the network namespace at path.
// Sockets made there stay in that namespace and are served from any thread.
func inNetns(t *testing.T, path string, fn func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	var err error
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		// The thread is not unlocked if it cannot go back: the runtime then
		// ends it rather than reuse it in the wrong namespace.
		own, e := os.Open("/proc/thread-self/ns/net")
		if e != nil {
			err = e
			return
		}
		defer own.Close()
		target, e := os.Open(path)
		if e != nil {
			err = e
			return
		}
		defer target.Close()
		if e := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); e != nil {
			err = e
			return
		}
		fn()
		if e := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); e != nil {
			err = e
			return
		}
		runtime.UnlockOSThread()
	}()
	wg.Wait()
	require.NoError(t, err)
}

// The container run's test host, served once for every class that uses it.
var (
	adoptOnce    sync.Once
	adoptedHosts [4]*listener
)

// adoptTestHost gives n the test host the container run's setup made.
func adoptTestHost(t *testing.T, n *network) {
	t.Helper()
	h := &containerTestHost
	require.NoError(t, h.err)
	require.True(t, h.http != nil && h.http2 != nil && h.http6 != nil && h.udp != nil, "the container run's setup handed over no test host (%s)", testHostEnv)
	adoptOnce.Do(func() {
		adoptedHosts = [4]*listener{
			serveTCP("test host", h.http, "testhost-2\n"),
			serveTCP("second test host", h.http2, "testhost-3\n"),
			serveTCP("test host (IPv6)", h.http6, "testhost-6\n"),
			serveUDP("test host DNS", h.udp),
		}
		for _, l := range adoptedHosts {
			l.close = func() {} // the next class serves them again
		}
	})
	n.hostHTTP, n.host2HTTP, n.host6HTTP, n.hostUDP = adoptedHosts[0], adoptedHosts[1], adoptedHosts[2], adoptedHosts[3]
}

func tcpListener(t *testing.T, name, addr, banner string) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, name)
	return serveTCP(name, ln, banner)
}

// serveTCP answers every connection accepted on ln with banner, counting them.
func serveTCP(name string, ln net.Listener, banner string) *listener {
	l := &listener{name: name, addr: ln.Addr().String(), close: func() { ln.Close() }}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.hits.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"+banner)
			}()
		}
	}()
	return l
}

func udpListener(t *testing.T, name, addr string) *listener {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	require.NoError(t, err, name)
	return serveUDP(name, pc)
}

// serveUDP counts the datagrams that reach pc.
func serveUDP(name string, pc net.PacketConn) *listener {
	l := &listener{name: name, addr: pc.LocalAddr().String(), close: func() { pc.Close() }}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			l.hits.Add(1)
		}
	}()
	return l
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
