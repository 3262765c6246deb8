// Package netrules lays down, inside the sandbox's network namespace, the
// route and the nftables rules that send every outbound TCP connection to
// the daemon's transparent listener and every DNS query to its resolver,
// and that reject the rest before it leaves. They are sent, before any
// agent code runs, on netlink sockets that a forked copy joined to the
// sandbox's user and network namespaces makes there; the daemon, the owner
// of that user namespace, sends on them (sessions never hold CAP_NET_ADMIN
// there). Nothing of it runs inside; the netfilter socket stays in the
// daemon until serve ends, for the answered set.
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/netrules/ ./pkg/egress/ ./test/attack/
package netrules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TableName is the one nftables table sandboxd owns in the sandbox.
const TableName = "sandboxd"

// Plan is what the rules do with each kind of packet.
type Plan struct {
	// Catch is the transparent listener (on loopback): every TCP
	// connection not bound for loopback goes there.
	Catch netip.AddrPort
	// DNS is the resolver (on loopback), for TCP and UDP to port 53 at any
	// address other than loopback; unset: such queries are rejected.
	DNS netip.AddrPort
	// Own are the container's own addresses: a connection to one goes to
	// the sandbox's loopback on the same port, as a container's reaches
	// its own servers.
	Own []netip.Addr
	// Refused are address ranges whose TCP connections get a reset before
	// the handshake (ECONNREFUSED), without reaching the listener.
	Refused []Range
	// Answered makes the set AnsweredSet, and resets before the handshake
	// every new TCP connection to an address not in it: for when every
	// phase reaches only addresses answered for an allowed name. The
	// daemon adds to it (AddAnswered) before the answer leaves.
	Answered bool
	// LogGroup, if not 0, is the nflog group every rejected packet that
	// is not TCP goes to first, for the audit (ReadRejected).
	LogGroup uint16
}

// AnsweredSet is the set of addresses answered for allowed names.
const AnsweredSet = "answered"

// Range is an inclusive range of IPv4 addresses.
type Range struct{ From, To netip.Addr }

// Error says what the kernel refused while the rules were made.
type Error struct {
	Step string // what was being made ("nat chain", "default route")
	Err  error
}

func (e *Error) Error() string {
	var errno syscall.Errno
	if !errors.As(e.Err, &errno) || errno == syscall.EAGAIN {
		return fmt.Sprintf("%s: %v", e.Step, e.Err)
	}
	// The kernel's own refusal.
	return fmt.Sprintf("%s: %v (the kernel needs nf_tables with NAT, reject and conntrack, and the runtime must let the sandbox's own root use them)", e.Step, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

var (
	ipv4Table = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	loopback  = netip.MustParsePrefix("127.0.0.0/8")
)

// install makes the route (over route, NETLINK_ROUTE) and the rules (over
// nft, NETLINK_NETFILTER) in the namespace the sockets were made in,
// replacing any table of the same name.
func install(route, nft *socket, p Plan) error {
	if !p.Catch.Addr().Is4() || !loopback.Contains(p.Catch.Addr()) {
		return fmt.Errorf("transparent listener %s: want an IPv4 loopback address", p.Catch)
	}
	if p.DNS.IsValid() && (!p.DNS.Addr().Is4() || !loopback.Contains(p.DNS.Addr())) {
		return fmt.Errorf("resolver %s: want an IPv4 loopback address", p.DNS)
	}
	if err := route.exchange([]netlink.Message{defaultRoute()}); err != nil {
		return &Error{Step: "add the route default dev lo src 127.0.0.1", Err: err}
	}
	msgs, err := nftMessages(func(c *nftables.Conn) error { return queueRules(c, p) })
	if err == nil {
		err = nft.exchange(msgs)
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if err != nil {
		return &Error{Step: "install the nftables rules", Err: err}
	}
	return nil
}

// queueRules queues on c the batch that makes the table afresh.
func queueRules(c *nftables.Conn, p Plan) error {
	c.AddTable(ipv4Table)
	c.DelTable(ipv4Table) // start from nothing, in the same batch
	t := c.AddTable(ipv4Table)
	own := &nftables.Set{Table: t, Name: "own", KeyType: nftables.TypeIPAddr}
	var elems []nftables.SetElement
	for _, a := range p.Own {
		if a = a.Unmap(); a.Is4() && !loopback.Contains(a) {
			elems = append(elems, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	if err := c.AddSet(own, elems); err != nil {
		return &Error{Step: "own-address set", Err: err}
	}

	// Before NAT: refuse by address, and reject everything that is not
	// TCP, or DNS over UDP, at once rather than let it hang.
	guard := c.AddChain(&nftables.Chain{Table: t, Name: "guard", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle})
	add := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	add(guard, slices.Concat(daddrIn(loopback), accept())...)
	add(guard, slices.Concat(daddrInSet(own), accept())...)
	for _, r := range p.Refused {
		add(guard, slices.Concat(protoIs(unix.IPPROTO_TCP), daddrRange(r), rejectReset())...)
	}
	if p.DNS.IsValid() {
		add(guard, slices.Concat(protoIs(unix.IPPROTO_UDP), dportIs(53), accept())...)
	}
	if p.Answered {
		answered := &nftables.Set{Table: t, Name: AnsweredSet, KeyType: nftables.TypeIPAddr}
		if err := c.AddSet(answered, nil); err != nil {
			return &Error{Step: "answered-address set", Err: err}
		}
		add(guard, slices.Concat(protoIs(unix.IPPROTO_TCP), ctNew(), daddrNotInSet(answered), rejectReset())...)
	}
	if p.LogGroup != 0 {
		add(guard, slices.Concat(protoNot(unix.IPPROTO_TCP), []expr.Any{&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_SNAPLEN, Group: p.LogGroup, Snaplen: 64}})...)
	}
	add(guard, slices.Concat(protoNot(unix.IPPROTO_TCP), rejectUnreachable())...)

	// NAT: port 53 to the resolver, the container's own addresses to
	// loopback, every other TCP connection to the listener.
	nat := c.AddChain(&nftables.Chain{Table: t, Name: "catch", Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	add(nat, slices.Concat(daddrIn(loopback), verdict(expr.VerdictReturn))...)
	if p.DNS.IsValid() {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(nat, slices.Concat(protoIs(proto), dportIs(53), dnat(p.DNS))...)
		}
	}
	add(nat, slices.Concat(daddrInSet(own), dnatAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1})))...)
	add(nat, slices.Concat(protoIs(unix.IPPROTO_TCP), dnat(p.Catch))...)

	// After NAT: a connection made straight to the listener, not sent
	// there by the rules, is refused rather than looped.
	loop := c.AddChain(&nftables.Chain{Table: t, Name: "loop", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	add(loop, slices.Concat(protoIs(unix.IPPROTO_TCP), daddrIs(p.Catch.Addr()), dportIs(p.Catch.Port()), notDNATed(), rejectReset())...)
	return nil
}

// Registers: 1 holds what is compared.
const reg = 1

// Kernel constants that x/sys/unix does not carry.
const (
	ipsDstNAT           = 1 << 5 // IPS_DST_NAT, include/uapi/linux/netfilter/nf_conntrack_common.h
	icmpPortUnreachable = 3      // ICMP_PORT_UNREACH
	ctStateNew          = 1 << 3 // NF_CT_STATE_BIT(IP_CT_NEW)
)

func ipField(off, n uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

func daddrIn(p netip.Prefix) []expr.Any {
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	return []expr.Any{
		ipField(16, 4),
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: p.Masked().Addr().AsSlice()},
	}
}

func daddrIs(a netip.Addr) []expr.Any {
	return []expr.Any{ipField(16, 4), &expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: a.AsSlice()}}
}

func daddrRange(r Range) []expr.Any {
	return []expr.Any{ipField(16, 4), &expr.Range{Op: expr.CmpOpEq, Register: reg, FromData: r.From.AsSlice(), ToData: r.To.AsSlice()}}
}

func daddrInSet(s *nftables.Set) []expr.Any {
	return []expr.Any{ipField(16, 4), &expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID}}
}

func daddrNotInSet(s *nftables.Set) []expr.Any {
	return []expr.Any{ipField(16, 4), &expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID, Invert: true}}
}

// ctNew matches the first packet of a connection: what is refused before
// the handshake is never an established connection's later packet.
func ctNew() []expr.Any { return ctBits(expr.CtKeySTATE, ctStateNew, expr.CmpOpNeq) }

// ctBits compares conntrack's key (a 32-bit field of bits) masked with
// bits against zero with op.
func ctBits(key expr.CtKey, bits uint32, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: key, Register: reg},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: op, Register: reg, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func protoIs(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{p}}}
}

func protoNot(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}, &expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: []byte{p}}}
}

// dportIs reads the destination port of TCP and UDP alike (the same
// offset in both headers); use it after protoIs.
func dportIs(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// notDNATed matches a connection that no NAT rule has sent where it goes.
func notDNATed() []expr.Any { return ctBits(expr.CtKeySTATUS, ipsDstNAT, expr.CmpOpEq) }

func dnat(to netip.AddrPort) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func dnatAddr(to netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

func accept() []expr.Any { return verdict(expr.VerdictAccept) }

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func rejectReset() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}
}

func rejectUnreachable() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreachable}}
}
