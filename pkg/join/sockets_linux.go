package join

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sockets inside the sandbox's network namespace are made by a forked copy
// of the daemon (forkJoined) that joins the sandbox's user and network
// namespaces, makes them with raw system calls, passes them back over a
// socket pair (SCM_RIGHTS) and exits, without an exec: where each was a
// start of this whole binary in the netns role, the four that serve makes
// before it is ready took most of its start (test/bench, ready). The copy
// never enters the sandbox's pid or mount namespace, so the agent never
// sees it, and a socket stays in the namespace it was made in.

// SocketKind is what Sockets makes.
type SocketKind int

const (
	// TCPListener is a TCP socket bound to Addr and listening.
	TCPListener SocketKind = iota
	// UDPSocket is a UDP socket bound to Addr.
	UDPSocket
	// NetlinkSocket is a netlink socket of protocol Proto.
	NetlinkSocket
)

// SocketSpec is one socket for Sockets to make.
type SocketSpec struct {
	Kind  SocketKind
	Addr  netip.AddrPort // TCPListener, UDPSocket
	Proto int            // NetlinkSocket
}

// The step of a socket's making that failed, as the copy reports it.
const (
	socketStepSocket = 1 + iota
	socketStepBind
	socketStepListen
)

// socketPlan is what the forked copy makes, prepared so that it allocates
// nothing: each socket's arguments, and the message it sends back, whose
// data is a (step, errno) pair per socket and whose control part carries
// the descriptors made.
type socketPlan struct {
	specs  []rawSocket
	conn   int    // the copy's end of the socket pair
	one    int32  // SO_REUSEADDR's value
	result []byte // 8 bytes per socket: step and errno, native order
	oob    []byte // a cmsghdr, then room for a descriptor per socket
	iov    unix.Iovec
	msg    unix.Msghdr
	count  int // descriptors made, set by the copy
}

type rawSocket struct {
	domain, typ, proto int
	addr               [unix.SizeofSockaddrInet6]byte
	addrLen            int // 0: not bound
	listen             bool
}

// cmsgHead is the size of a cmsghdr on the 64-bit systems pkg/join builds
// for, where descriptors follow it without padding.
const cmsgHead = unix.SizeofCmsghdr

// Sockets makes each spec's socket inside the sandbox's network namespace.
// The result has one entry per spec: a file, or nil with its error in errs
// (a port already taken inside, say). err is the fork's or the join's.
func (t Target) Sockets(ctx context.Context, specs []SocketSpec) (files []*os.File, errs []error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if len(specs) == 0 {
		return nil, nil, nil
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])

	sp := &socketPlan{conn: pair[1], one: 1, result: make([]byte, 8*len(specs)), oob: make([]byte, cmsgHead+4*len(specs)+8)}
	for _, s := range specs {
		sp.specs = append(sp.specs, rawSocketOf(s))
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&sp.oob[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_RIGHTS
	sp.iov.Base = &sp.result[0]
	sp.iov.SetLen(len(sp.result))
	sp.msg.Iov = &sp.iov
	sp.msg.SetIovlen(1)
	sp.msg.Control = &sp.oob[0]

	plan := &forkPlan{parent: os.Getpid(), record: new([2]int32), sockets: sp}
	for _, kind := range []string{"user", "net"} {
		f := t.held[kind]
		if f == nil {
			if f, err = os.Open(fmt.Sprintf("/proc/%d/ns/%s", t.PID, kind)); err != nil {
				return nil, nil, fmt.Errorf("open the sandbox's %s namespace: %w (has it ended? see sandboxd status)", kind, err)
			}
			defer f.Close()
		}
		plan.namespaces = append(plan.namespaces, int(f.Fd()))
	}
	reportR, reportW, err := reportPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("join: report pipe: %w", err)
	}
	defer reportR.Close()
	plan.report = reportW

	pid, errno := forkInTurn(plan)
	unix.Close(reportW)
	if errno != 0 {
		return nil, nil, fmt.Errorf("join: fork: %w", errno)
	}
	// The copy's report is EOF when it has sent the sockets and exited, or
	// the stage at which it failed.
	var rec [8]byte
	_, rerr := io.ReadFull(reportR, rec[:])
	var ws unix.WaitStatus
	unix.Wait4(pid, &ws, 0, nil)
	if rerr == nil {
		stage, e := int32(binary.NativeEndian.Uint32(rec[:4])), syscall.Errno(binary.NativeEndian.Uint32(rec[4:]))
		return nil, nil, &SetupError{Code: ExitSetup, Msg: forkFailure(-stage, e)}
	}

	result := make([]byte, len(sp.result))
	oob := make([]byte, len(sp.oob))
	n, noob, _, _, err := unix.Recvmsg(pair[0], result, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("the sandbox's sockets were not passed back: %w", err)
	}
	fds, perr := passedDescriptors(oob[:noob])
	if perr != nil || n != len(result) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, fmt.Errorf("the sandbox's sockets came back malformed (%d bytes of %d: %v)", n, len(result), perr)
	}
	files, errs = make([]*os.File, len(specs)), make([]error, len(specs))
	for i, s := range specs {
		step, e := binary.NativeEndian.Uint32(result[8*i:]), syscall.Errno(binary.NativeEndian.Uint32(result[8*i+4:]))
		if step != 0 {
			errs[i] = socketError(s, int(step), e)
			continue
		}
		if len(fds) == 0 {
			errs[i] = fmt.Errorf("%s: no descriptor was passed back", s.describe())
			continue
		}
		files[i], fds = os.NewFile(uintptr(fds[0]), "sandbox-socket"), fds[1:]
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return files, errs, nil
}

// isIPv4 says whether a is made an AF_INET socket's address (an IPv4
// address, or one mapped into IPv6), for the sockets made here and the
// netns role's connections alike.
func isIPv4(a netip.Addr) bool { return a.Is4() || a.Is4In6() }

// passedDescriptors are the descriptors of a message's SCM_RIGHTS parts.
func passedDescriptors(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse passed descriptors: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, fmt.Errorf("parse passed descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func rawSocketOf(s SocketSpec) rawSocket {
	if s.Kind == NetlinkSocket {
		return rawSocket{domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: s.Proto}
	}
	r := rawSocket{domain: unix.AF_INET, typ: unix.SOCK_STREAM, listen: s.Kind == TCPListener}
	if s.Kind == UDPSocket {
		r.typ = unix.SOCK_DGRAM
	}
	port := s.Addr.Port()
	if a := s.Addr.Addr(); isIPv4(a) {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.addr[0]))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		sa.Addr = a.Unmap().As4()
		r.addrLen = unix.SizeofSockaddrInet4
	} else {
		r.domain = unix.AF_INET6
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&r.addr[0]))
		sa.Family = unix.AF_INET6
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		sa.Addr = a.As16()
		r.addrLen = unix.SizeofSockaddrInet6
	}
	return r
}

func (s SocketSpec) describe() string {
	switch s.Kind {
	case UDPSocket:
		return s.Addr.String() + "/udp"
	case NetlinkSocket:
		return fmt.Sprintf("netlink protocol %d", s.Proto)
	}
	return s.Addr.String()
}

func socketError(s SocketSpec, step int, e syscall.Errno) error {
	what := map[int]string{socketStepSocket: "socket", socketStepBind: "bind", socketStepListen: "listen"}[step]
	return fmt.Errorf("%s %s: %w", what, s.describe(), e)
}

// makeSockets is the forked copy's part once it has joined the
// namespaces: it makes each socket, sends the results and the descriptors
// on the plan's connection, and reports whether that send failed. Like the
// rest of forkJoined's copy it makes raw system calls only, and allocates
// nothing.
//
//go:norace
//go:nocheckptr
//go:nosplit
func makeSockets(s *socketPlan) syscall.Errno {
	var (
		i     int
		r1    uintptr
		errno syscall.Errno
		sp    *rawSocket
		res   *[2]int32
	)
	s.count = 0
	for i = 0; i < len(s.specs); i++ {
		sp = &s.specs[i]
		res = (*[2]int32)(unsafe.Pointer(&s.result[8*i]))
		r1, _, errno = syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(sp.domain), uintptr(sp.typ|syscall.SOCK_CLOEXEC), uintptr(sp.proto))
		if errno != 0 {
			res[0], res[1] = socketStepSocket, int32(errno)
			continue
		}
		if sp.listen {
			syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, r1, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, uintptr(unsafe.Pointer(&s.one)), 4, 0)
		}
		if sp.addrLen > 0 {
			if _, _, errno = syscall.RawSyscall(syscall.SYS_BIND, r1, uintptr(unsafe.Pointer(&sp.addr[0])), uintptr(sp.addrLen)); errno != 0 {
				syscall.RawSyscall(syscall.SYS_CLOSE, r1, 0, 0)
				res[0], res[1] = socketStepBind, int32(errno)
				continue
			}
		}
		if sp.listen {
			if _, _, errno = syscall.RawSyscall(syscall.SYS_LISTEN, r1, 4096, 0); errno != 0 {
				syscall.RawSyscall(syscall.SYS_CLOSE, r1, 0, 0)
				res[0], res[1] = socketStepListen, int32(errno)
				continue
			}
		}
		res[0], res[1] = 0, 0
		*(*int32)(unsafe.Pointer(&s.oob[cmsgHead+4*s.count])) = int32(r1)
		s.count++
	}
	(*unix.Cmsghdr)(unsafe.Pointer(&s.oob[0])).Len = uint64(cmsgHead + 4*s.count)
	s.msg.Controllen = uint64((cmsgHead + 4*s.count + 7) &^ 7)
	if s.count == 0 {
		s.msg.Controllen = 0
	}
	_, _, errno = syscall.RawSyscall(syscall.SYS_SENDMSG, uintptr(s.conn), uintptr(unsafe.Pointer(&s.msg)), 0)
	return errno
}
