package egress

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// BenchmarkDNSCacheHit times a question answered from the resolver's cache
// for one persistent UDP client, against the same client asking the test
// zone (which answers from its own table) directly, alternating the two.
func BenchmarkDNSCacheHit(b *testing.B) {
	zone := startZone(b)
	addr, _ := startDNS(b, DNSConfig{Agent: Policy{Mode: Public}}, zone)
	q := mustQuery(b, "a.test.", dnsmessage.TypeA)
	dial := func(to string) net.Conn {
		c, err := net.Dial("udp", to)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	direct, cached := dial(zone.Addr), dial(addr)
	buf := make([]byte, 1500)
	ask := func(c net.Conn) time.Duration {
		t0 := time.Now()
		c.SetDeadline(t0.Add(5 * time.Second))
		if _, err := c.Write(q); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	ask(cached) // fills the cache
	before := zone.UDP.Load()
	var lDirect, lCached []time.Duration
	for b.Loop() {
		lDirect = append(lDirect, ask(direct))
		lCached = append(lCached, ask(cached))
	}
	if got := zone.UDP.Load() - before; got != int32(len(lDirect)) {
		b.Fatalf("the zone saw %d queries for %d direct ones: some cached answers were not", got, len(lDirect))
	}
	pd50, pd99 := percentiles(lDirect)
	pc50, pc99 := percentiles(lCached)
	b.ReportMetric(float64(pd50.Nanoseconds())/1e3, "direct-p50-µs")
	b.ReportMetric(float64(pd99.Nanoseconds())/1e3, "direct-p99-µs")
	b.ReportMetric(float64(pc50.Nanoseconds())/1e3, "cached-p50-µs")
	b.ReportMetric(float64(pc99.Nanoseconds())/1e3, "cached-p99-µs")
}
