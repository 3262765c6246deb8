package join

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/tail"
)

// The daemon cannot setns into the sandbox's network namespace (it lacks
// CAP_SYS_ADMIN over its owner, and a threaded process cannot join the user
// namespace first: docs/failures.md#sockets-inside-come-from-a-helper).
// Listeners, UDP and netlink sockets are made by a forked copy
// (sockets_linux.go); a connection, which may wait for its peer, by a
// short-lived child in the netns role: it joins the sandbox's user and
// network namespaces only, connects there, hands the socket back over a
// unix socket (SCM_RIGHTS) and exits. A socket stays in the namespace it was
// made in, and the daemon serves it from any goroutine. The child never enters
// the sandbox's pid or mount namespace, so the agent never sees it.

const roleNetns = "netns"

func init() { childproc.Add(roleNetns, netnsChild) }

// netnsReply is what the child sends with the descriptors.
type netnsReply struct {
	Errors []string `json:"errors"` // one per requested address; "" where the socket was made
}

// Listen makes a TCP listener inside the sandbox's network namespace at each
// address. The result has one entry per address; a nil entry comes with its
// error in errs (a port already taken inside, say), so the caller can choose
// another address.
func (t Target) Listen(ctx context.Context, addrs []netip.AddrPort) (lns []net.Listener, errs []error, err error) {
	return adoptSockets(ctx, t, TCPListener, addrs, net.FileListener)
}

// ListenPacket makes a UDP socket inside the sandbox's network namespace,
// bound to each address (the resolver's), with per-address errors as
// Listen gives them.
func (t Target) ListenPacket(ctx context.Context, addrs []netip.AddrPort) (pcs []net.PacketConn, errs []error, err error) {
	return adoptSockets(ctx, t, UDPSocket, addrs, net.FilePacketConn)
}

// adoptSockets makes one socket of kind per address and adopts each; a nil
// entry comes with its error.
func adoptSockets[T any](ctx context.Context, t Target, kind SocketKind, addrs []netip.AddrPort, adopt func(*os.File) (T, error)) ([]T, []error, error) {
	specs := make([]SocketSpec, len(addrs))
	for i, a := range addrs {
		specs[i] = SocketSpec{Kind: kind, Addr: a}
	}
	files, errs, err := t.Sockets(ctx, specs)
	if err != nil {
		return nil, nil, err
	}
	out := make([]T, len(addrs))
	for i, f := range files {
		if f == nil {
			continue
		}
		s, err := adopt(f)
		f.Close()
		if err != nil {
			errs[i] = fmt.Errorf("adopt the socket for %s: %w", specs[i].describe(), err)
			continue
		}
		out[i] = s
	}
	return out, errs, nil
}

// SockDiag opens a NETLINK_SOCK_DIAG socket inside the sandbox's network
// namespace: its queries see the sockets there (whose is a caught
// connection), for the socket's life. Reading TCP sockets takes no
// capability.
func (t Target) SockDiag(ctx context.Context) (*os.File, error) {
	return t.Netlink(ctx, unix.NETLINK_SOCK_DIAG)
}

// Netlink opens a netlink socket of protocol proto inside the sandbox's
// network namespace. Its opener is the joined copy, which holds
// CAP_NET_ADMIN there; the daemon, the owner of the sandbox's user
// namespace, may then use it for what takes that capability (the network
// rules, their answered set and their log).
func (t Target) Netlink(ctx context.Context, proto int) (*os.File, error) {
	files, errs, err := t.Sockets(ctx, []SocketSpec{{Kind: NetlinkSocket, Proto: proto}})
	if err != nil {
		return nil, err
	}
	if errs[0] != nil {
		return nil, fmt.Errorf("netlink socket inside the sandbox: %w", errs[0])
	}
	return files[0], nil
}

// Dial connects to addr from inside the sandbox's network namespace (ssh -L
// reaches the servers the agent started).
func (t Target) Dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	files, perAddr, err := t.netnsCall(ctx, []string{"dial", addr.String()}, 1)
	if err != nil {
		return nil, err
	}
	if perAddr[0] != "" {
		return nil, fmt.Errorf("dial %s inside the sandbox: %s", addr, perAddr[0])
	}
	defer files[0].Close()
	return net.FileConn(files[0])
}

func (t Target) netnsCall(ctx context.Context, args []string, n int) ([]*os.File, []string, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(pair[0]), "netns-parent")
	theirs := os.NewFile(uintptr(pair[1]), "netns-child")
	defer ours.Close()

	cmd := t.Join([]string{"user", "net"}, roleNetns, args...)
	cmd.ExtraFiles = []*os.File{theirs}
	stderr := tail.New(4096)
	cmd.Stderr = stderr
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("start netns helper: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*n))
	nr, noob, _, _, rerr := unix.Recvmsg(int(ours.Fd()), buf, oob, 0)
	werr := cmd.Wait()
	if rerr != nil || nr == 0 {
		return nil, nil, fmt.Errorf("netns helper gave no answer (%v, %v): %s", rerr, werr, stderr.String())
	}
	var reply netnsReply
	if err := json.Unmarshal(buf[:nr], &reply); err != nil || len(reply.Errors) != n {
		return nil, nil, fmt.Errorf("netns helper answer %q: %v", buf[:nr], err)
	}
	fds, err := passedDescriptors(oob[:noob])
	if err != nil {
		return nil, nil, err
	}
	var files []*os.File
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), "sandbox-socket"))
	}
	return files, reply.Errors, nil
}

// netnsChild runs in the sandbox's user and network namespaces.
func netnsChild(args []string) int {
	conn := 4
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "netns: usage: dial ADDR...")
		return 2
	}
	verb, addrs := args[0], args[1:]
	reply := netnsReply{Errors: make([]string, len(addrs))}
	var fds []int
	for i, s := range addrs {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			reply.Errors[i] = err.Error()
			continue
		}
		fd, err := sandboxSocket(verb, ap)
		if err != nil {
			reply.Errors[i] = err.Error()
			continue
		}
		fds = append(fds, fd)
	}
	msg, _ := json.Marshal(reply)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(conn, msg, oob, nil, 0); err != nil {
		fmt.Fprintf(os.Stderr, "netns: send descriptors: %v\n", err)
		return 1
	}
	return 0
}

// sandboxSocket connects to ap from the sandbox's network namespace (verb
// is "dial", the role's only one).
func sandboxSocket(verb string, ap netip.AddrPort) (int, error) {
	if verb != "dial" {
		return -1, fmt.Errorf("unknown verb %q", verb)
	}
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	if !isIPv4(ap.Addr()) {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	tv := unix.Timeval{Sec: 10}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return -1, fmt.Errorf("connection refused: nothing listens on %s inside the sandbox", ap)
		}
		return -1, fmt.Errorf("connect %s: %w", ap, err)
	}
	return fd, nil
}
