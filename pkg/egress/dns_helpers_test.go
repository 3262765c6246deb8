package egress

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// startZone serves the test zone: the tiny authoritative name server the
// resolver's tests forward to, on loopback, so that every test name is
// answered there and no test asks the machine's resolver about a real name.
func startZone(t testing.TB) *sandboxtest.DNSZone { return sandboxtest.StartDNSZone(t, zoneAnswer) }

// zoneAnswer is what the test zone answers for a question.
func zoneAnswer(q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
	name := strings.ToLower(q.Name.String())
	rr := func(t dnsmessage.Type, ttl uint32, body dnsmessage.ResourceBody) dnsmessage.Resource {
		return dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: q.Name, Type: t, Class: dnsmessage.ClassINET, TTL: ttl}, Body: body}
	}
	mustName := func(s string) dnsmessage.Name { return dnsmessage.MustNewName(s) }
	a := func(s string) dnsmessage.ResourceBody {
		return &dnsmessage.AResource{A: netip.MustParseAddr(s).As4()}
	}
	switch name {
	case "a.test.", "allowed.test.":
		switch q.Type {
		case dnsmessage.TypeA:
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeA, 300, a("192.0.2.1"))}
		case dnsmessage.TypeAAAA:
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeAAAA, 300, &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::1").As16()})}
		case dnsmessage.TypeMX:
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeMX, 300, &dnsmessage.MXResource{Pref: 10, MX: mustName("mail.a.test.")})}
		case dnsmessage.TypeTXT:
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeTXT, 300, &dnsmessage.TXTResource{TXT: []string{"v=test1"}})}
		case dnsmessage.TypeSRV:
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeSRV, 300, &dnsmessage.SRVResource{Priority: 1, Weight: 2, Port: 5432, Target: mustName("db.a.test.")})}
		case dnsmessage.TypeHTTPS:
			// SvcPriority 1, TargetName ".", no parameters.
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeHTTPS, 300, &dnsmessage.UnknownResource{Type: dnsmessage.TypeHTTPS, Data: []byte{0, 1, 0}})}
		}
		return 0, nil
	case "www.allowed.test.":
		// A CNAME chain out of the allowlist: the addresses at its end are
		// answered for the name asked.
		cname := rr(dnsmessage.TypeCNAME, 300, &dnsmessage.CNAMEResource{CNAME: mustName("edge.cdn.test.")})
		end := dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: mustName("edge.cdn.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 30}, Body: a("198.51.100.7")}
		if q.Type == dnsmessage.TypeA {
			return 0, []dnsmessage.Resource{cname, end}
		}
		return 0, []dnsmessage.Resource{cname}
	case "edge.cdn.test.":
		if q.Type == dnsmessage.TypeA {
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeA, 30, a("198.51.100.7"))}
		}
		return 0, nil
	case "private.test.":
		if q.Type == dnsmessage.TypeA {
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypeA, 300, a("10.1.2.3"))}
		}
		return 0, nil
	case "1.2.0.192.in-addr.arpa.":
		if q.Type == dnsmessage.TypePTR {
			return 0, []dnsmessage.Resource{rr(dnsmessage.TypePTR, 300, &dnsmessage.PTRResource{PTR: mustName("a.test.")})}
		}
		return 0, nil
	case "big.test.":
		// More than 512 bytes: a UDP client without EDNS gets TC.
		var out []dnsmessage.Resource
		for i := range 40 {
			out = append(out, rr(dnsmessage.TypeA, 300, a(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}).String())))
		}
		return 0, out
	case "short.test.":
		return 0, []dnsmessage.Resource{rr(dnsmessage.TypeA, 2, a("192.0.2.99"))}
	}
	return dnsmessage.RCodeNameError, nil
}

// startDNS serves a resolver made from c, forwarding to z when c has no
// upstream, on one loopback port (UDP and TCP), until the test ends.
func startDNS(t testing.TB, c DNSConfig, z *sandboxtest.DNSZone) (addr string, s *DNSServer) {
	t.Helper()
	if c.Upstream == nil && z != nil {
		c.Upstream = &DNSForwarder{Servers: []string{z.Addr}}
	}
	if c.Log == nil {
		c.Log = quietLog
	}
	s = NewDNSServer(c)
	pc, ln := sandboxtest.ListenUDPAndTCP(t)
	serveUntilCleanup(t, func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	return pc.LocalAddr().String(), s
}

// query asks addr one question over network with a Go client and returns
// the parsed answer.
func query(t testing.TB, network, addr, name string, typ dnsmessage.Type, edns bool) (dnsmessage.Message, []byte) {
	t.Helper()
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0x4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	if edns {
		var rh dnsmessage.ResourceHeader
		require.NoError(t, rh.SetEDNS0(4096, 0, false))
		msg.Additionals = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.OPTResource{}}}
	}
	raw, err := msg.Pack()
	require.NoError(t, err)
	resp := exchangeRaw(t, network, addr, raw)
	require.NotNil(t, resp, "no answer to %s %s over %s", name, typ, network)
	var out dnsmessage.Message
	require.NoError(t, out.Unpack(resp))
	return out, resp
}

// exchangeRaw sends raw and returns the answer, or nil after 5 s.
func exchangeRaw(t testing.TB, network, addr string, raw []byte) []byte {
	t.Helper()
	c, err := net.Dial(network, addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if network == "tcp" {
		raw = append(binary.BigEndian.AppendUint16(nil, uint16(len(raw))), raw...)
	}
	_, err = c.Write(raw)
	require.NoError(t, err)
	if network == "tcp" {
		resp, err := readTCPMsg(c)
		if err != nil {
			return nil
		}
		return resp
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}
