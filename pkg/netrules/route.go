package netrules

import (
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// defaultRoute is the request for `default dev lo src 127.0.0.1`: connect()
// to any IPv4 address then proceeds (to be caught by the rules) without a
// second interface, so /proc/net/dev keeps listing lo alone. IPv6 gets no
// route and fails at once with ENETUNREACH, so clients fall back to IPv4.
func defaultRoute() netlink.Message {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(unix.RTA_OIF, 1) // lo is always interface 1 in a new namespace
	ae.Bytes(unix.RTA_PREFSRC, []byte{127, 0, 0, 1})
	attrs, _ := ae.Encode() // two fixed attributes: nothing to fail
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol,
	// scope, type, then 32 bits of flags.
	hdr := []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST, 0, 0, 0, 0}
	return netlink.Message{
		Header: netlink.Header{
			Type:  unix.RTM_NEWROUTE,
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace,
		},
		Data: append(hdr, attrs...),
	}
}
