package netrules

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Rejected is a packet the rules rejected (not TCP, not DNS), as the
// nflog group reports it.
type Rejected struct {
	Proto    uint8 // IPPROTO_UDP, IPPROTO_ICMP, …
	Src, Dst netip.AddrPort
}

// nfnetlink_log's part of the netlink protocol (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgPacket  = unix.NFNL_SUBSYS_ULOG<<8 | 0
	nfulnlMsgConfig  = unix.NFNL_SUBSYS_ULOG<<8 | 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2
	nfulaPayload     = 9
)

// ReadRejected binds f, a NETLINK_NETFILTER socket inside the sandbox's
// network namespace (join.Target.Netlink), to group and calls fn with
// every packet logged there, until ctx ends or f fails. Binding takes
// CAP_NET_ADMIN over the namespace: f's opener had it, and so does the
// daemon, the owner of the sandbox's user namespace.
func ReadRejected(ctx context.Context, f *os.File, group uint16, fn func(Rejected)) error {
	fd := int(f.Fd())
	defer f.Close()
	// A blocking receive is not woken by a close from another thread: it
	// wakes every half second to see whether ctx has ended.
	tv := unix.Timeval{Usec: 500_000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("nflog: receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nflog: bind: %w", err)
	}
	s := &socket{f: f}
	if err := s.exchange([]netlink.Message{nflogConfig(group, nfulaCfgCmd, []byte{nfulnlCfgCmdBind})}); err != nil {
		return fmt.Errorf("nflog: bind group %d: %w", group, err)
	}
	mode := binary.BigEndian.AppendUint32(nil, 64) // copy_range
	mode = append(mode, nfulnlCopyPacket, 0)
	if err := s.exchange([]netlink.Message{nflogConfig(group, nfulaCfgMode, mode)}); err != nil {
		return fmt.Errorf("nflog: copy mode: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) {
			continue // ENOBUFS: records were lost to a flood, not the socket
		}
		if err != nil {
			return fmt.Errorf("nflog: receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != nfulnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			if r, ok := parseRejected(m.Data[4:]); ok {
				fn(r)
			}
		}
	}
}

// nflogConfig is one NFULNL_MSG_CONFIG with one attribute.
func nflogConfig(group uint16, attr uint16, data []byte) netlink.Message {
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(attr, data)
	attrs, _ := ae.Encode() // one attribute of bytes: nothing to fail
	// struct nfgenmsg: family, version, then the group (big-endian).
	hdr := binary.BigEndian.AppendUint16([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0}, group)
	return netlink.Message{
		Header: netlink.Header{Type: nfulnlMsgConfig, Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(hdr, attrs...),
	}
}

// parseRejected reads the IPv4 packet in the NFULA_PAYLOAD attribute of a
// logged packet's attributes.
func parseRejected(attrs []byte) (Rejected, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs))
		typ := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
		if l < 4 || l > len(attrs) {
			return Rejected{}, false
		}
		if typ == nfulaPayload {
			return parseIPv4(attrs[4:l])
		}
		attrs = attrs[min((l+3)&^3, len(attrs)):]
	}
	return Rejected{}, false
}

func parseIPv4(p []byte) (Rejected, bool) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return Rejected{}, false
	}
	ihl := int(p[0]&0xf) * 4
	r := Rejected{Proto: p[9]}
	src, dst := netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
	var sport, dport uint16
	if (r.Proto == unix.IPPROTO_UDP || r.Proto == unix.IPPROTO_UDPLITE || r.Proto == unix.IPPROTO_SCTP) && len(p) >= ihl+4 {
		sport, dport = binary.BigEndian.Uint16(p[ihl:]), binary.BigEndian.Uint16(p[ihl+2:])
	}
	r.Src, r.Dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return r, true
}
