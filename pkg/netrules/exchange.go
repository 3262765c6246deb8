package netrules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// answerWait bounds each wait for the kernel's answers. The kernel answers
// a request before sendmsg returns, so a wait this long means a socket
// that is not the one it seems.
const answerWait = 5 * time.Second

// socket is a netlink socket made inside the sandbox's network namespace
// (join.Target.Sockets), on which the daemon sends what takes
// CAP_NET_ADMIN there: the socket's opener had it, and so does the
// daemon, the owner of the sandbox's user namespace.
type socket struct {
	f   *os.File
	seq uint32 // the last sequence number used
	buf []byte // for the answers, made at the first exchange
}

func newSocket(f *os.File) (*socket, error) {
	fd := int(f.Fd())
	// Without it a lost answer would hold the caller (and every DNS answer
	// behind it) for good.
	tv := unix.NsecToTimeval(answerWait.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("netlink receive timeout: %w", err)
	}
	// Acknowledgements without a copy of the request, and errors with the
	// kernel's own words where it has them. A kernel without these options
	// answers as before.
	unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	return &socket{f: f}, nil
}

func (s *socket) Close() error { return s.f.Close() }

// exchange sends msgs in one write and waits for the answer to each that
// asks for an acknowledgement; it returns the first error the kernel gave.
// Answers to an earlier exchange (one that failed half-way) are skipped by
// their sequence numbers.
func (s *socket) exchange(msgs []netlink.Message) error {
	var out []byte
	first := s.seq + 1
	waiting := map[uint32]bool{}
	for i := range msgs {
		s.seq++
		msgs[i].Header.Sequence = s.seq
		msgs[i].Header.PID = 0
		msgs[i].Header.Length = uint32(unix.NLMSG_HDRLEN+len(msgs[i].Data)+3) &^ 3
		b, err := msgs[i].MarshalBinary()
		if err != nil {
			return err
		}
		out = append(out, b...)
		if msgs[i].Header.Flags&netlink.Acknowledge != 0 {
			waiting[s.seq] = true
		}
	}
	fd := int(s.f.Fd())
	if err := unix.Sendto(fd, out, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	for len(waiting) > 0 {
		n, from, err := unix.Recvfrom(fd, s.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("netlink receive: no answer from the kernel in %v (the request may or may not have been carried out)", answerWait)
		}
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue // only the kernel answers
		}
		answers, err := syscall.ParseNetlinkMessage(s.buf[:n])
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		for _, a := range answers {
			// In this exchange's window, counted modulo 2^32.
			seq := a.Header.Seq
			if seq-first > s.seq-first || a.Header.Type != unix.NLMSG_ERROR || len(a.Data) < 4 {
				continue
			}
			if code := int32(binary.NativeEndian.Uint32(a.Data)); code != 0 {
				err := error(syscall.Errno(-code))
				if why := extAckMessage(a); why != "" {
					err = fmt.Errorf("%w (%s)", err, why)
				}
				return err
			}
			delete(waiting, seq)
		}
	}
	return nil
}

// extAckMessage is the kernel's message in an error's extended
// acknowledgement (NLMSGERR_ATTR_MSG), if it gave one.
func extAckMessage(m syscall.NetlinkMessage) string {
	if m.Header.Flags&unix.NLM_F_ACK_TLVS == 0 {
		return ""
	}
	// struct nlmsgerr: the error, then the request's header (its payload
	// is capped away by NETLINK_CAP_ACK), then the attributes.
	off := 4 + unix.NLMSG_HDRLEN
	if m.Header.Flags&unix.NLM_F_CAPPED == 0 && len(m.Data) >= 8 {
		off = 4 + int(binary.NativeEndian.Uint32(m.Data[4:]))
	}
	if off > len(m.Data) {
		return ""
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[off:])
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == unix.NLMSGERR_ATTR_MSG {
			return ad.String()
		}
	}
	return ""
}

// nftMessages returns the batch google/nftables makes for what build
// queues. The library sends on a socket it dials itself, in the caller's
// network namespace, which the daemon cannot join (setns takes
// CAP_SYS_ADMIN in its own namespace, which a container's root lacks); so
// its dial is given a stand-in that keeps the batch and acknowledges each
// message, and the batch is sent on a socket made inside, where the
// kernel's own answers are read (socket.exchange).
func nftMessages(build func(c *nftables.Conn) error) ([]netlink.Message, error) {
	var batch []netlink.Message
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil { // a read for the next acknowledgement
			return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
		}
		batch = append(batch, req...)
		return nil, nil
	}))
	if err != nil {
		return nil, err
	}
	if err := build(c); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	return batch, nil
}
