package sandboxtest

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// DNSZone is a tiny authoritative name server on the substrate's loopback,
// on one port for UDP and TCP, that a test's resolver forwards to: every
// name a test resolves is answered there, and no test asks the machine's
// resolver about a real name.
type DNSZone struct {
	Addr     string       // host:port, UDP and TCP
	UDP, TCP atomic.Int32 // queries answered on each
	// Silent makes it read queries and answer none, as a dead server does.
	Silent atomic.Bool
	// Delay holds each UDP answer back this long (nanoseconds), as a slow
	// server does.
	Delay  atomic.Int64
	answer func(dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource)
}

// StartDNSZone serves answer's records until the test ends; NXDOMAIN
// answers carry an SOA (a negative answer a resolver may keep), and an
// answer larger than 512 bytes over UDP is truncated (TC).
func StartDNSZone(t testing.TB, answer func(dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource)) *DNSZone {
	t.Helper()
	z := &DNSZone{answer: answer}
	pc, ln := ListenUDPAndTCP(t)
	z.Addr = pc.LocalAddr().String()
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); ln.Close(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if z.Silent.Load() {
				continue
			}
			if out := z.reply(buf[:n], 512); out != nil {
				z.UDP.Add(1)
				if d := time.Duration(z.Delay.Load()); d > 0 {
					wg.Add(1)
					time.AfterFunc(d, func() { defer wg.Done(); pc.WriteTo(out, from) })
				} else {
					pc.WriteTo(out, from)
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				for {
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil || z.Silent.Load() {
						return
					}
					raw := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, raw); err != nil {
						return
					}
					out := z.reply(raw, 65535)
					z.TCP.Add(1)
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
				}
			}()
		}
	}()
	return z
}

// reply answers one query within maxLen bytes; nil for input it drops.
func (z *DNSZone) reply(raw []byte, maxLen int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(raw)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	rcode, answers := z.answer(q)
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: rcode},
		Questions: []dnsmessage.Question{q},
		Answers:   answers,
	}
	if rcode == dnsmessage.RCodeNameError {
		msg.Authorities = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("test."), Type: dnsmessage.TypeSOA, Class: dnsmessage.ClassINET, TTL: 60},
			Body: &dnsmessage.SOAResource{NS: dnsmessage.MustNewName("ns.test."), MBox: dnsmessage.MustNewName("admin.test."),
				Serial: 1, Refresh: 60, Retry: 60, Expire: 60, MinTTL: 60},
		}}
	}
	out, err := msg.Pack()
	if err != nil {
		return nil
	}
	if len(out) > maxLen {
		msg.Header.Truncated = true
		msg.Answers = nil
		out, _ = msg.Pack()
	}
	return out
}

// ListenUDPAndTCP listens on one loopback port on both UDP and TCP, as a
// name server does (dig falls back to TCP on the same port).
func ListenUDPAndTCP(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		if ln, err := net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatal("no loopback port free on both UDP and TCP")
	return nil, nil
}
