package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/procfs"
)

// attributor tells a visit's caught connections from the agent's. The
// visitor (the verifier) shares the sandbox's network namespace, so its
// connections are caught by the same rules; but it runs in a pid namespace
// of its own, in the substrate's, where the agent can neither see nor
// ptrace it. A caught connection belongs to a visit when the client socket
// (found by its address pair with sock_diag, inside the sandbox's network
// namespace) is held by a process of that visit's pid namespace. Anything
// that cannot be attributed is the agent's.
type attributor struct {
	diag *os.File // NETLINK_SOCK_DIAG inside the sandbox's network namespace; nil: nothing is attributed

	diagMu sync.Mutex    // one query at a time on diag
	seq    atomic.Uint32 // the last request's netlink sequence number
	mu     sync.Mutex
	visits map[*visitRecord]struct{}
}

// visitRecord is one open visit as the attributor knows it.
type visitRecord struct {
	judge Judge
	pidns uint64 // the inode of the visit's pid namespace; 0 until it runs
}

// open registers a visit under policy; the returned started function
// takes the visitor's pid once it runs, done ends the visit.
func (a *attributor) open(policy Policy, ctx context.Context) (started func(pid int), done func()) {
	v := &visitRecord{judge: Judge{Policy: policy, Ctx: ctx, Label: "verifier"}}
	a.mu.Lock()
	if a.visits == nil {
		a.visits = map[*visitRecord]struct{}{}
	}
	a.visits[v] = struct{}{}
	a.mu.Unlock()
	started = func(pid int) {
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid), &st); err != nil {
			return // gone already: nothing of it can connect
		}
		a.mu.Lock()
		v.pidns = st.Ino
		a.mu.Unlock()
	}
	done = func() {
		a.mu.Lock()
		delete(a.visits, v)
		a.mu.Unlock()
	}
	return started, done
}

// attribute is the Catcher's Visit.
func (a *attributor) attribute(client, dst netip.AddrPort) (Judge, bool) {
	byNS := a.openVisits()
	if len(byNS) == 0 {
		return Judge{}, false
	}
	inode, err := a.inode(client, dst)
	if err != nil || inode == 0 {
		return Judge{}, false
	}
	ns := holderNamespace(inode, byNS)
	j, ok := byNS[ns]
	return j, ok
}

// holderNamespace finds, among the processes of the given pid
// namespaces, one that holds socket inode, and returns its namespace.
func holderNamespace(inode uint32, byNS map[uint64]Judge) uint64 {
	want := "socket:[" + strconv.FormatUint(uint64(inode), 10) + "]"
	for _, pid := range procfs.PIDs() {
		proc := "/proc/" + strconv.Itoa(pid)
		var st unix.Stat_t
		if unix.Stat(proc+"/ns/pid", &st) != nil {
			continue
		}
		if _, ok := byNS[st.Ino]; !ok {
			continue
		}
		dir := proc + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(dir + fd.Name()); err == nil && l == want {
				return st.Ino
			}
		}
	}
	return 0
}

// inode asks sock_diag for the inode of the TCP socket that connected from
// client to dst, as an IPv4 socket or an IPv6 one with mapped addresses.
func (a *attributor) inode(client, dst netip.AddrPort) (uint32, error) {
	a.diagMu.Lock()
	defer a.diagMu.Unlock()
	var last error
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ino, err := a.query(family, client, dst)
		if err == nil {
			return ino, nil
		}
		last = err
	}
	return 0, last
}

// sizes of struct inet_diag_req_v2 and the offset of idiag_inode in
// struct inet_diag_msg (linux/inet_diag.h).
const (
	inetDiagReqV2Len = 56
	inetDiagInodeOff = 68
	tcpListen        = 10 // TCP_LISTEN, idiag_state
)

var errNoSocket = errors.New("sock_diag: no such socket")

func (a *attributor) query(family uint8, client, dst netip.AddrPort) (uint32, error) {
	req := diagRequest(family, unix.IPPROTO_TCP, unix.NLM_F_REQUEST)
	id := req[unix.NLMSG_HDRLEN+8:]
	binary.BigEndian.PutUint16(id[0:], client.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	put := func(b []byte, ap netip.AddrPort) {
		if family == unix.AF_INET {
			a4 := ap.Addr().Unmap().As4()
			copy(b, a4[:])
			return
		}
		a16 := netip.AddrFrom16(ap.Addr().As16()).As16() // IPv4 as ::ffff:a.b.c.d
		copy(b, a16[:])
	}
	put(id[4:20], client)
	put(id[20:36], dst)
	var inode uint32
	err := a.exchange(req, 8192, func(m syscall.NetlinkMessage) (bool, error) {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 && int32(binary.NativeEndian.Uint32(m.Data)) != 0 {
				return true, errNoSocket
			}
		case unix.SOCK_DIAG_BY_FAMILY:
			// The kernel's exact lookup falls back to a listener on
			// the client's address: that is not the client.
			if len(m.Data) >= inetDiagInodeOff+4 && m.Data[1] != tcpListen {
				inode = binary.NativeEndian.Uint32(m.Data[inetDiagInodeOff:])
				return true, nil
			}
			return true, errNoSocket
		}
		return false, nil
	})
	return inode, err
}

// exchange sends req on the sock_diag socket and hands each message of
// the answer to each, until it says the answer is complete.
func (a *attributor) exchange(req []byte, bufSize int, each func(m syscall.NetlinkMessage) (done bool, err error)) error {
	// Each request has a sequence number of its own, and only its answer is
	// read: what is left of an exchange that ended early is skipped, never
	// taken for this one's.
	seq := a.seq.Add(1)
	binary.NativeEndian.PutUint32(req[8:], seq)
	fd := int(a.diag.Fd())
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: send: %w", err)
	}
	buf := make([]byte, bufSize)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sock_diag: receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			if done, err := each(m); done || err != nil {
				return err
			}
		}
	}
}

// queryPolicy is the resolver's PolicyFor: the visit a query comes from,
// by the socket that sent it (UDP or TCP, found by its source address
// alone: a query redirected from port 53 elsewhere keeps its first
// destination in the client's socket).
func (a *attributor) queryPolicy(network string, client netip.AddrPort) (string, Policy, bool) {
	byNS := a.openVisits()
	if len(byNS) == 0 {
		return "", Policy{}, false
	}
	proto := uint8(unix.IPPROTO_UDP)
	if network == "tcp" {
		proto = unix.IPPROTO_TCP
	}
	a.diagMu.Lock()
	inode, err := a.dumpFind(proto, client)
	a.diagMu.Unlock()
	if err != nil || inode == 0 {
		return "", Policy{}, false
	}
	j, ok := byNS[holderNamespace(inode, byNS)]
	return j.Label, j.Policy, ok
}

// openVisits are the open visits that run, by pid namespace; nil without
// a sock_diag socket.
func (a *attributor) openVisits() map[uint64]Judge {
	if a == nil || a.diag == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	byNS := map[uint64]Judge{}
	for v := range a.visits {
		if v.pidns != 0 {
			byNS[v.pidns] = v.judge
		}
	}
	return byNS
}

// dumpFind lists the sockets of proto and returns the inode of the one
// bound to client (IPv4, or IPv6 with the mapped address).
func (a *attributor) dumpFind(proto uint8, client netip.AddrPort) (uint32, error) {
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := diagRequest(family, proto, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		found := uint32(0)
		err := a.exchange(req, 32<<10, func(m syscall.NetlinkMessage) (bool, error) {
			switch m.Header.Type {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				return true, nil
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(m.Data) < inetDiagInodeOff+4 || found != 0 {
					return false, nil
				}
				id := m.Data[4:]
				if binary.BigEndian.Uint16(id[0:]) != client.Port() {
					return false, nil
				}
				var src netip.Addr
				if family == unix.AF_INET {
					src = netip.AddrFrom4([4]byte(id[4:8]))
				} else {
					src = netip.AddrFrom16([16]byte(id[4:20])).Unmap()
				}
				if src == client.Addr().Unmap() || src.IsUnspecified() {
					found = binary.NativeEndian.Uint32(m.Data[inetDiagInodeOff:])
				}
			}
			return false, nil
		})
		if err != nil {
			return 0, err
		}
		if found != 0 {
			return found, nil
		}
	}
	return 0, errNoSocket
}

// diagRequest is a netlink message carrying an inet_diag_req_v2 for
// family and proto, every state; the caller fills in its socket id.
func diagRequest(family, proto uint8, flags uint16) []byte {
	req := make([]byte, unix.NLMSG_HDRLEN+inetDiagReqV2Len)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], flags)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, proto
	binary.NativeEndian.PutUint32(r[4:], ^uint32(0))  // every state
	binary.NativeEndian.PutUint32(r[48:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(r[52:], ^uint32(0))
	return req
}
