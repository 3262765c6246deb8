package netrules

import (
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// addDefaultRoute adds `default dev lo src 127.0.0.1` in the calling
// thread's network namespace: connect() to any IPv4 address then proceeds
// (to be caught by the rules) without a second interface, so
// /proc/net/dev keeps listing lo alone. IPv6 gets no route and fails at
// once with ENETUNREACH, so clients fall back to IPv4.
func addDefaultRoute() error {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return fmt.Errorf("open rtnetlink: %w", err)
	}
	defer c.Close()
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(unix.RTA_OIF, 1) // lo is always interface 1 in a new namespace
	ae.Bytes(unix.RTA_PREFSRC, []byte{127, 0, 0, 1})
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol,
	// scope, type, then 32 bits of flags.
	hdr := []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST, 0, 0, 0, 0}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  unix.RTM_NEWROUTE,
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace,
		},
		Data: append(hdr, attrs...),
	})
	if err != nil {
		return fmt.Errorf("RTM_NEWROUTE: %w", err)
	}
	return nil
}
