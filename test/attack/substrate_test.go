package attack

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
)

// The suite runs on two substrates. On the host (the default) the daemon
// serves in this process on a bare machine, in host mode, as `sandboxd
// trial` serves. In a container (`scripts/container-tests.sh attack`) the
// same test binary is the container's pid 1 and the daemon serves as in
// production: not in host mode, with Docker's default capabilities, the
// documented security options and Docker's seccomp profile around it. The
// container run is started in the role attack-container-setup, which makes
// what the classes need and a default-capability container cannot make, and
// then executes the suite itself:
//
//   - the network classes' test host: a network namespace of its own (owned
//     by a user namespace of its own) joined to the container's by a veth
//     pair, with the same addresses as on the host. Building it needs
//     CAP_NET_ADMIN in the container's network namespace, so the container
//     is started with --cap-add NET_ADMIN; the setup drops it from every
//     set (bounding set included) before it executes the suite, and checks
//     that what is left is exactly the capability set of a container started
//     without it. The test host's listeners are made in its namespace and
//     handed to the suite, which serves and counts them as on the host.
//   - IPv6 on the container's loopback (Docker turns it off in a container
//     without an IPv6 network), for the attempts at the substrate's ::1.
//
// Workdirs are subdirectories of a tmpfs that docker run mounts (the suite
// cannot mount one without CAP_SYS_ADMIN), so that filling one never fills
// the machine.
const (
	// substrateEnv is "container" in the container run.
	substrateEnv = "SANDBOXD_ATTACK_SUBSTRATE"
	// workdirsEnv names the tmpfs the container run's workdirs are made in.
	workdirsEnv = "SANDBOXD_ATTACK_WORKDIRS"
	// dockerCapsEnv is the bounding set (hex, as /proc/PID/status prints it)
	// of a container started with the same options but no --cap-add: what
	// the suite must run with.
	dockerCapsEnv = "SANDBOXD_ATTACK_DOCKER_CAPS"
	// testHostEnv hands the test host's listeners to the suite: NAME=FD,...
	testHostEnv = "SANDBOXD_ATTACK_TESTHOST"

	roleContainerSetup = "attack-container-setup"
	roleTestHost       = "attack-testhost"

	// vethContainer is the container's end of the test host's veth pair.
	vethContainer = "sbxa0"
)

// inContainerRun reports whether this run is the container run.
var inContainerRun = os.Getenv(substrateEnv) == "container"

func init() {
	childproc.Add(roleContainerSetup, containerSetup)
	childproc.Add(roleTestHost, testHostMain)
}

// hostRunOnly ends a test that starts containers of its own: the container
// run leaves it out (scripts/container-tests.sh passes -test.skip), and
// must say so if it is asked to make it.
func hostRunOnly(t *testing.T) {
	t.Helper()
	if inContainerRun {
		t.Fatalf("%s runs from the host run only (it starts its own container); the container run leaves it out with -test.skip", t.Name())
	}
}

// containerTestHost is the test host the setup made, adopted at start.
var containerTestHost struct {
	http, http2, http6 net.Listener
	udp                net.PacketConn
	err                error
}

// The suite adopts the test host's listeners before anything can start a
// process: the descriptors it inherited are not close-on-exec, and must
// reach no child, least of all the sandbox.
func init() {
	spec := os.Getenv(testHostEnv)
	if spec == "" {
		return
	}
	os.Unsetenv(testHostEnv)
	for _, kv := range strings.Split(spec, ",") {
		name, fdText, _ := strings.Cut(kv, "=")
		fd, err := strconv.Atoi(fdText)
		if err != nil {
			containerTestHost.err = fmt.Errorf("%s: %q", testHostEnv, spec)
			return
		}
		f := os.NewFile(uintptr(fd), name)
		switch name {
		case "http", "http2", "http6":
			var ln net.Listener
			ln, err = net.FileListener(f)
			switch name {
			case "http":
				containerTestHost.http = ln
			case "http2":
				containerTestHost.http2 = ln
			case "http6":
				containerTestHost.http6 = ln
			}
		case "udp":
			containerTestHost.udp, err = net.FilePacketConn(f)
		default:
			err = fmt.Errorf("unknown listener")
		}
		f.Close()
		if err != nil && containerTestHost.err == nil {
			containerTestHost.err = fmt.Errorf("test host listener %s (fd %d): %v", name, fd, err)
		}
	}
}

// containerSetup is the container's pid 1 before the suite: it makes the
// test host, gives the loopback IPv6, drops CAP_NET_ADMIN and executes the
// suite in its place. args are the test binary's flags.
func containerSetup(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "attack-container-setup: "+format+"\n", a...)
		return 1
	}
	wds := os.Getenv(workdirsEnv)
	var fs unix.Statfs_t
	if wds == "" || unix.Statfs(wds, &fs) != nil || fs.Type != unix.TMPFS_MAGIC || fs.Flags&unix.ST_NOEXEC != 0 {
		return fail("%s=%q must name a tmpfs mounted with exec (docker run --tmpfs)", workdirsEnv, wds)
	}
	want, err := strconv.ParseUint(os.Getenv(dockerCapsEnv), 16, 64)
	if err != nil {
		return fail("%s=%q: the bounding set of a container without --cap-add", dockerCapsEnv, os.Getenv(dockerCapsEnv))
	}
	// Docker turns IPv6 off in a container without an IPv6 network; the
	// host has ::1, and so must the substrate here. Root in the container
	// may write its network namespace's settings (/proc/sys is writable
	// under systempaths=unconfined).
	for _, dev := range []string{"all", "default", "lo"} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("0\n"), 0); err != nil {
			return fail("IPv6 on %s: %v", dev, err)
		}
	}
	fds, names, err := startContainerTestHost()
	if err != nil {
		return fail("the test host: %v", err)
	}
	// Exec from this thread: the capability sets, the bounding set among
	// them, are per thread, and execve keeps the caller's.
	runtime.LockOSThread()
	if err := dropCapability(unix.CAP_NET_ADMIN); err != nil {
		return fail("dropping CAP_NET_ADMIN: %v", err)
	}
	have, err := threadCaps()
	if err != nil {
		return fail("%v", err)
	}
	for _, set := range []string{"CapBnd", "CapPrm", "CapEff"} {
		if have[set] != want {
			return fail("%s is %016x after the drop, a container without --cap-add has %016x", set, have[set], want)
		}
	}
	for _, set := range []string{"CapInh", "CapAmb"} {
		if have[set]&^want != 0 {
			return fail("%s is %016x after the drop: more than %016x", set, have[set], want)
		}
	}
	var spec []string
	for i, fd := range fds {
		spec = append(spec, fmt.Sprintf("%s=%d", names[i], fd))
	}
	self, err := os.Executable()
	if err != nil {
		return fail("%v", err)
	}
	env := append(os.Environ(), substrateEnv+"=container", testHostEnv+"="+strings.Join(spec, ","))
	fmt.Fprintf(os.Stderr, "attack-container-setup: test host ready; CAP_NET_ADMIN dropped, CapBnd=CapPrm=CapEff=%016x as without --cap-add\n", want)
	err = syscall.Exec(self, append([]string{self}, args...), env)
	return fail("exec %s: %v", self, err)
}

// dropCapability takes c out of this thread's bounding, ambient, effective,
// permitted and inheritable sets.
func dropCapability(c int) error {
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
		return fmt.Errorf("PR_CAPBSET_DROP: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	i, bit := c/32, uint32(1)<<(c%32)
	data[i].Effective &^= bit
	data[i].Permitted &^= bit
	data[i].Inheritable &^= bit
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// threadCaps reads this thread's capability sets.
func threadCaps() (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":\t")
		if ok && strings.HasPrefix(k, "Cap") {
			out[k], _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return out, nil
}

// startContainerTestHost starts the test host: this binary in the role
// attack-testhost, in a user and a network namespace of its own, joined to
// the container's namespace by a veth pair. It returns the descriptors of
// its listeners (not close-on-exec, for the suite) and their names.
func startContainerTestHost() ([]int, []string, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	theirs := os.NewFile(uintptr(pair[1]), "testhost-socket")
	defer theirs.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = []string{"PATH=" + childproc.DefaultPath, childproc.Env + "=" + roleTestHost}
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	// Its end of the pair says "go" once the veth is there.
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	// It lives as long as the container (no parent-death signal: the exec
	// of the suite would be one), holding the test host's namespace.
	go cmd.Wait()
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, args := range [][]string{
		{"link", "add", vethContainer, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"addr", "add", hostSide + testPrefix, "dev", vethContainer},
		{"-6", "addr", "add", hostSide6 + "/64", "dev", vethContainer, "nodad"},
		{"link", "set", vethContainer, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := unix.Write(pair[0], []byte("go")); err != nil {
		return nil, nil, err
	}
	tv := unix.NsecToTimeval((20 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4*8))
	n, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("waiting for its listeners: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, nil, fmt.Errorf("its message: %v (%d control messages; it said %q)", err, len(msgs), buf[:n])
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return nil, nil, err
	}
	names := strings.Split(string(buf[:n]), ",")
	if len(names) != len(fds) {
		return nil, nil, fmt.Errorf("%d descriptors for %q", len(fds), buf[:n])
	}
	return fds, names, nil
}

// testHostMain is the test host: root of a user namespace of its own, in a
// network namespace of its own. Once the container's end of the veth pair
// is there, it takes the test host's addresses, listens on them and hands
// the listeners to the setup on descriptor 3; then it lives on, holding the
// namespace, until the container ends.
func testHostMain(_ []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "attack-testhost: "+format+"\n", a...)
		return 1
	}
	sock := 3
	go1 := make([]byte, 8)
	if _, err := unix.Read(sock, go1); err != nil {
		return fail("waiting for the veth: %v", err)
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", testHost + testPrefix, "dev", "eth0"},
		{"addr", "add", testHost2 + testPrefix, "dev", "eth0"},
		{"-6", "addr", "add", testHost6 + "/64", "dev", "eth0", "nodad"},
		{"link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fail("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	var names []string
	var fds []int
	for _, l := range []struct{ name, network, addr string }{
		{"http", "tcp", testHost + ":80"},
		{"http2", "tcp", testHost2 + ":80"},
		{"http6", "tcp", "[" + testHost6 + "]:80"},
		{"udp", "udp", testHost + ":53"},
	} {
		var f *os.File
		var err error
		if l.network == "udp" {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", l.addr); err == nil {
				f, err = pc.(*net.UDPConn).File()
			}
		} else {
			var ln net.Listener
			if ln, err = net.Listen("tcp", l.addr); err == nil {
				f, err = ln.(*net.TCPListener).File()
			}
		}
		if err != nil {
			return fail("%s %s: %v", l.network, l.addr, err)
		}
		names = append(names, l.name)
		fds = append(fds, int(f.Fd()))
	}
	if err := unix.Sendmsg(sock, []byte(strings.Join(names, ",")), unix.UnixRights(fds...), nil, 0); err != nil {
		return fail("handing over the listeners: %v", err)
	}
	for {
		unix.Pause()
	}
}
