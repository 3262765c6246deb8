package egress

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzDNSQuery feeds the resolver's request parser whatever a sandbox
// program may send, under each policy, and the record walker the same bytes
// as an upstream's answer: nothing may panic, every answer is a response
// with the query's ID that parses, and over UDP none exceeds what the
// client takes.
func FuzzDNSQuery(f *testing.F) {
	seed := func(name string, t dnsmessage.Type, edns bool) []byte {
		msg := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: 99, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: t, Class: dnsmessage.ClassINET}},
		}
		if edns {
			var rh dnsmessage.ResourceHeader
			rh.SetEDNS0(65535, 0, true)
			msg.Additionals = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.OPTResource{}}}
		}
		raw, _ := msg.Pack()
		return raw
	}
	f.Add(seed("allowed.test.", dnsmessage.TypeA, false))
	f.Add(seed("db.internal.", dnsmessage.TypeAAAA, true))
	f.Add(seed("5.0.18.172.in-addr.arpa.", dnsmessage.TypePTR, false))
	f.Add(seed("x.test.", dnsmessage.TypeHTTPS, true))
	f.Add([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}) // a pointer to itself
	f.Add([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 2, 1, 'a', 0, 0, 1, 0, 1, 0, 0, 41, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 41, 16, 0, 0, 0, 0, 0, 0, 0})

	hosts := map[string][]netip.Addr{"db.internal": {netip.MustParseAddr("172.18.0.5"), netip.MustParseAddr("fd00::5")}}
	var servers []*DNSServer
	for _, pol := range []Policy{{Mode: Public}, allowTest(), {Mode: NoNetwork}} {
		servers = append(servers, NewDNSServer(DNSConfig{
			Hosts: hosts, Agent: pol, Answers: NewAnswers(16), Log: quietLog,
			Upstream: &DNSForwarder{}, // no servers: every forward fails at once
		}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		recordTTLs(data)
		answerRecords(data)
		for _, s := range servers {
			for _, network := range []string{"udp", "tcp"} {
				q, resp, wait := s.answerNow(data, network, netip.AddrPort{})
				if q == nil {
					if resp != nil {
						t.Fatalf("an answer to what is not a query: %x", resp)
					}
					continue
				}
				if resp == nil {
					resp = wait(context.Background())
					<-s.inflight
				}
				if network == "udp" {
					resp = fitUDP(resp, q)
					if len(resp) > max(q.udpSize, dnsMinUDP) {
						t.Fatalf("%d bytes over UDP to a client that takes %d", len(resp), q.udpSize)
					}
				}
				if len(resp) < dnsHeaderLen || resp[2]&0x80 == 0 || binary.BigEndian.Uint16(resp) != binary.BigEndian.Uint16(data) {
					t.Fatalf("not a response to %x: %x", data, resp)
				}
				var p dnsmessage.Parser
				if _, err := p.Start(resp); err != nil {
					t.Fatalf("the answer does not parse: %v: %x", err, resp)
				}
			}
		}
	})
}
