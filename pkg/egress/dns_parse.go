package egress

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsQuery is what the resolver needs of one request: its question, its
// flags and what the client can take back over UDP.
type dnsQuery struct {
	raw      []byte // the request as it came
	id       uint16
	rd, cd   bool
	q        dnsmessage.Question
	name     string // the question's name in lower case, no trailing dot
	qEnd     int    // raw[12:qEnd] is the question section, as the client wrote it
	edns     bool
	dnssecOK bool
	udpSize  int // the largest UDP answer the client takes
}

// Sizes of the DNS wire format that the server relies on.
const (
	dnsHeaderLen = 12
	// dnsMinUDP is what every client takes over UDP without EDNS (RFC 1035).
	dnsMinUDP = 512
	// dnsMaxUDP bounds what the server sends over UDP even when a client
	// offers more: 1232 is the size the DNS flag day 2020 settled on, which
	// avoids IP fragmentation.
	dnsMaxUDP = 1232
	// dnsMaxMsg is the largest message TCP framing can carry.
	dnsMaxMsg = 65535
)

// errNotQuery marks input that gets no answer at all: too short to carry an
// ID, or a response rather than a query (answering those would let two
// resolvers bounce packets off each other forever).
var errNotQuery = errors.New("not a DNS query")

// errFormat marks a query the server answers with FORMERR.
var errFormat = errors.New("malformed DNS query")

// parseQuery reads a request: one question, at most one OPT record. Only
// standard queries pass; the caller answers errFormat and a wrong opcode with
// an error code, and drops errNotQuery.
func parseQuery(raw []byte) (*dnsQuery, dnsmessage.RCode, error) {
	var p dnsmessage.Parser
	h, err := p.Start(raw)
	if err != nil || h.Response {
		return nil, 0, errNotQuery
	}
	q := &dnsQuery{raw: raw, id: h.ID, rd: h.RecursionDesired, cd: h.CheckingDisabled, udpSize: dnsMinUDP}
	if h.OpCode != 0 {
		return q, dnsmessage.RCodeNotImplemented, errFormat
	}
	if binary.BigEndian.Uint16(raw[4:6]) != 1 {
		return q, dnsmessage.RCodeFormatError, errFormat
	}
	if q.q, err = p.Question(); err != nil {
		return q, dnsmessage.RCodeFormatError, errFormat
	}
	// No client compresses the question's name (there is nothing before it
	// to point to): one that does is refused, so that the question's bytes
	// are the name's one wire form, which the cache and the check of an
	// upstream's answer compare.
	if q.qEnd, err = skipName(raw, dnsHeaderLen, false); err != nil || q.qEnd+4 > len(raw) {
		return q, dnsmessage.RCodeFormatError, errFormat
	}
	q.qEnd += 4
	if err := p.SkipAllQuestions(); err != nil {
		return q, dnsmessage.RCodeFormatError, errFormat
	}
	if err := p.SkipAllAnswers(); err != nil {
		return q, dnsmessage.RCodeFormatError, errFormat
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return q, dnsmessage.RCodeFormatError, errFormat
	}
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return q, dnsmessage.RCodeFormatError, errFormat
		}
		if rh.Type == dnsmessage.TypeOPT {
			if q.edns { // RFC 6891 6.1.1: more than one OPT is FORMERR
				return q, dnsmessage.RCodeFormatError, errFormat
			}
			q.edns = true
			q.dnssecOK = rh.DNSSECAllowed()
			q.udpSize = min(max(int(rh.Class), dnsMinUDP), dnsMaxUDP)
		}
		if err := p.SkipAdditional(); err != nil {
			return q, dnsmessage.RCodeFormatError, errFormat
		}
	}
	q.name = strings.ToLower(strings.TrimSuffix(q.q.Name.String(), "."))
	return q, dnsmessage.RCodeSuccess, nil
}

// skipName returns the offset just past the name at off in msg, which may
// end in a compression pointer if compressed allows it.
func skipName(msg []byte, off int, compressed bool) (int, error) {
	for hops := 0; ; hops++ {
		if off >= len(msg) || hops > 127 {
			return 0, errFormat
		}
		l := int(msg[off])
		switch {
		case l == 0:
			return off + 1, nil
		case l&0xc0 == 0xc0: // a pointer ends the name where it stands
			if !compressed || off+2 > len(msg) {
				return 0, errFormat
			}
			return off + 2, nil
		case l&0xc0 != 0:
			return 0, errFormat
		}
		off += 1 + l
	}
}

// ttlField is where a record's TTL sits in a message.
type ttlField struct {
	off int
	ttl uint32
}

// recordTTLs walks the records of a well-formed response and lists their
// TTL fields, OPT's aside (its TTL field holds flags), so that an answer
// from the cache can say how long it has left.
func recordTTLs(msg []byte) ([]ttlField, error) {
	if len(msg) < dnsHeaderLen {
		return nil, errFormat
	}
	qd := int(binary.BigEndian.Uint16(msg[4:6]))
	rrs := int(binary.BigEndian.Uint16(msg[6:8])) + int(binary.BigEndian.Uint16(msg[8:10])) + int(binary.BigEndian.Uint16(msg[10:12]))
	off := dnsHeaderLen
	var err error
	for range qd {
		if off, err = skipName(msg, off, true); err != nil {
			return nil, err
		}
		off += 4
	}
	var out []ttlField
	for range rrs {
		if off, err = skipName(msg, off, true); err != nil {
			return nil, err
		}
		if off+10 > len(msg) {
			return nil, errFormat
		}
		typ := dnsmessage.Type(binary.BigEndian.Uint16(msg[off:]))
		if typ != dnsmessage.TypeOPT {
			out = append(out, ttlField{off: off + 4, ttl: binary.BigEndian.Uint32(msg[off+4:])})
		}
		off += 10 + int(binary.BigEndian.Uint16(msg[off+8:]))
		if off > len(msg) {
			return nil, errFormat
		}
	}
	return out, nil
}

// answerRecords lists the A and AAAA records of a response, whichever name
// they stand under (the end of a CNAME chain stands under the chain's last
// name), their smallest TTL, and the names the answer's CNAME records lead
// to.
func answerRecords(msg []byte) (addrs []netip.Addr, ttl uint32, cnames []string) {
	var p dnsmessage.Parser
	if _, err := p.Start(msg); err != nil {
		return nil, 0, nil
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0, nil
	}
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return addrs, ttl, cnames
		}
		var a netip.Addr
		switch h.Type {
		case dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return addrs, ttl, cnames
			}
			a = netip.AddrFrom4(r.A)
		case dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return addrs, ttl, cnames
			}
			a = netip.AddrFrom16(r.AAAA).Unmap()
		case dnsmessage.TypeCNAME:
			r, err := p.CNAMEResource()
			if err != nil {
				return addrs, ttl, cnames
			}
			if n, err := NormalizeHost(r.CNAME.String()); err == nil {
				cnames = append(cnames, n)
			}
			continue
		default:
			if err := p.SkipAnswer(); err != nil {
				return addrs, ttl, cnames
			}
			continue
		}
		if len(addrs) == 0 || h.TTL < ttl {
			ttl = h.TTL
		}
		addrs = append(addrs, a)
	}
}

// reply builds the server's own answer to q: an error code, or the given
// address records (the hosts file's) under the question's name.
func reply(q *dnsQuery, rcode dnsmessage.RCode, addrs []netip.Addr, ptr []string) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID: q.id, Response: true, RecursionDesired: q.rd, RecursionAvailable: true,
		CheckingDisabled: q.cd, RCode: rcode, Authoritative: len(addrs)+len(ptr) > 0,
	})
	b.EnableCompression()
	// Errors below cannot happen for a question that parsed; a failed
	// build answers with the bare header, which still ends the wait.
	if q.q.Name.Length > 0 {
		if err := b.StartQuestions(); err == nil {
			b.Question(q.q)
		}
	}
	if err := b.StartAnswers(); err == nil {
		rh := dnsmessage.ResourceHeader{Name: q.q.Name, Class: dnsmessage.ClassINET, TTL: hostsTTL}
		for _, a := range addrs {
			if a.Is4() {
				b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			} else {
				b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		for _, n := range ptr {
			if name, err := dnsmessage.NewName(n + "."); err == nil {
				b.PTRResource(rh, dnsmessage.PTRResource{PTR: name})
			}
		}
	}
	if q.edns {
		if err := b.StartAdditionals(); err == nil {
			var rh dnsmessage.ResourceHeader
			if rh.SetEDNS0(dnsMaxUDP, dnsmessage.RCodeSuccess, false) == nil {
				b.OPTResource(rh, dnsmessage.OPTResource{})
			}
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return headerOnly(q, rcode)
	}
	return msg
}

// hostsTTL is the TTL of answers from the hosts file: they never change
// while the sandbox lives, but a client should not keep them for ever.
const hostsTTL = 600

// headerOnly is an answer with no sections at all.
func headerOnly(q *dnsQuery, rcode dnsmessage.RCode) []byte {
	msg := make([]byte, dnsHeaderLen)
	binary.BigEndian.PutUint16(msg, q.id)
	flags := uint16(1<<15) | uint16(1<<7) | uint16(rcode&0xf) // QR, RA
	if q.rd {
		flags |= 1 << 8
	}
	binary.BigEndian.PutUint16(msg[2:], flags)
	return msg
}

// forwardQuery is q as the name servers are asked it: the question, RD and
// CD, and an OPT record only if the client sent one, with its DO bit and no
// option. Options are the client's own (a DNS cookie names the client, and
// an answer from the cache that echoed another client's would be dropped as
// forged), so none is passed on.
func forwardQuery(q *dnsQuery) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 64+q.qEnd), dnsmessage.Header{ID: q.id, RecursionDesired: q.rd, CheckingDisabled: q.cd})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q.q); err != nil {
		return nil, err
	}
	if q.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(dnsMaxUDP, dnsmessage.RCodeSuccess, q.dnssecOK); err != nil {
			return nil, err
		}
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// truncated is resp cut to its header and question with the TC bit set, for
// a UDP client that cannot take all of it: it asks again over TCP.
func truncated(resp []byte, q *dnsQuery) []byte {
	if len(resp) < q.qEnd || q.qEnd < dnsHeaderLen {
		return headerOnly(q, dnsmessage.RCodeServerFailure)
	}
	out := append([]byte(nil), resp[:q.qEnd]...)
	out[2] |= 0x02 // TC
	clear(out[6:12])
	return out
}

// reverseName is the in-addr.arpa or ip6.arpa name of a, as a PTR question
// names it.
func reverseName(a netip.Addr) string {
	var b strings.Builder
	if a.Is4() {
		v := a.As4()
		for i := 3; i >= 0; i-- {
			b.WriteString(strconv.Itoa(int(v[i])))
			b.WriteByte('.')
		}
		b.WriteString("in-addr.arpa")
		return b.String()
	}
	const hex = "0123456789abcdef"
	v := a.As16()
	for i := 15; i >= 0; i-- {
		b.WriteByte(hex[v[i]&0xf])
		b.WriteByte('.')
		b.WriteByte(hex[v[i]>>4])
		b.WriteByte('.')
	}
	b.WriteString("ip6.arpa")
	return b.String()
}
