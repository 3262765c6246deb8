package egress

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

var digStatus = regexp.MustCompile(`status: ([A-Z]+)`)

// dig asks the resolver at addr (host:port) with the real dig and returns
// the status and each answer record as "name type data".
func dig(t *testing.T, addr string, args ...string) (string, []string) {
	t.Helper()
	if _, err := exec.LookPath("dig"); err != nil {
		sandboxtest.Need(t, "dig (dnsutils; scripts/deps.sh test)")
	}
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	argv := append([]string{"@" + host, "-p", port, "+tries=1", "+time=4", "+noall", "+comments", "+answer"}, args...)
	out, err := exec.Command("dig", argv...).CombinedOutput()
	require.NoError(t, err, "dig %v: %s", argv, out)
	m := digStatus.FindStringSubmatch(string(out))
	require.NotNil(t, m, "dig printed no status: %s", out)
	var answers []string
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && !strings.HasPrefix(line, ";") {
			answers = append(answers, strings.Join(append([]string{f[0], f[3]}, f[4:]...), " "))
		}
	}
	return m[1], answers
}

func allowTest() Policy {
	return Policy{Mode: Allowlist, AllowedHosts: []string{"allowed.test", "*.allowed.test"}}
}

// TestDNSPolicies drives dig against the resolver under each policy:
// public answers every type truthfully, allowlist only allowed names and
// the hosts file's, no-network refuses everything.
func TestDNSPolicies(t *testing.T) {
	zone := startZone(t)
	hosts := map[string][]netip.Addr{"db.internal": {netip.MustParseAddr("172.18.0.5")}}
	peers := []Peer{{Name: "redis", Addr: netip.MustParseAddr("127.0.0.2")}}
	servers := map[Mode]string{}
	for _, pol := range []Policy{{Mode: Public}, allowTest(), {Mode: NoNetwork}} {
		servers[pol.Mode], _ = startDNS(t, DNSConfig{Hosts: hosts, Peers: peers, Agent: pol}, zone)
	}
	tests := []struct {
		mode    Mode
		args    []string
		status  string
		answers []string
	}{
		{Public, []string{"a.test", "A"}, "NOERROR", []string{"a.test. A 192.0.2.1"}},
		{Public, []string{"a.test", "AAAA"}, "NOERROR", []string{"a.test. AAAA 2001:db8::1"}},
		{Public, []string{"a.test", "MX"}, "NOERROR", []string{"a.test. MX 10 mail.a.test."}},
		{Public, []string{"a.test", "TXT"}, "NOERROR", []string{`a.test. TXT "v=test1"`}},
		{Public, []string{"a.test", "SRV"}, "NOERROR", []string{"a.test. SRV 1 2 5432 db.a.test."}},
		{Public, []string{"a.test", "HTTPS"}, "NOERROR", []string{"a.test. HTTPS 1 ."}},
		{Public, []string{"-x", "192.0.2.1"}, "NOERROR", []string{"1.2.0.192.in-addr.arpa. PTR a.test."}},
		{Public, []string{"www.allowed.test", "A"}, "NOERROR", []string{"www.allowed.test. CNAME edge.cdn.test.", "edge.cdn.test. A 198.51.100.7"}},
		{Public, []string{"private.test", "A"}, "NOERROR", []string{"private.test. A 10.1.2.3"}},
		{Public, []string{"nowhere.test", "A"}, "NXDOMAIN", nil},
		{Public, []string{"db.internal", "A"}, "NOERROR", []string{"db.internal. A 172.18.0.5"}},
		{Public, []string{"db.internal", "AAAA"}, "NOERROR", nil},
		{Public, []string{"redis", "A"}, "NOERROR", []string{"redis. A 127.0.0.2"}},
		{Public, []string{"-x", "172.18.0.5"}, "NOERROR", []string{"5.0.18.172.in-addr.arpa. PTR db.internal."}},
		{Allowlist, []string{"allowed.test", "A"}, "NOERROR", []string{"allowed.test. A 192.0.2.1"}},
		{Allowlist, []string{"ALLOWED.test", "TXT"}, "NOERROR", []string{`ALLOWED.test. TXT "v=test1"`}},
		{Allowlist, []string{"www.allowed.test", "A"}, "NOERROR", []string{"www.allowed.test. CNAME edge.cdn.test.", "edge.cdn.test. A 198.51.100.7"}},
		{Allowlist, []string{"a.test", "A"}, "NXDOMAIN", nil},
		{Allowlist, []string{"a.test", "MX"}, "NXDOMAIN", nil},
		{Allowlist, []string{"-x", "192.0.2.1"}, "NXDOMAIN", nil},
		{Allowlist, []string{"db.internal", "A"}, "NOERROR", []string{"db.internal. A 172.18.0.5"}},
		{Allowlist, []string{"redis", "A"}, "NOERROR", []string{"redis. A 127.0.0.2"}},
		{NoNetwork, []string{"a.test", "A"}, "REFUSED", nil},
		{NoNetwork, []string{"allowed.test", "A"}, "REFUSED", nil},
		{NoNetwork, []string{"redis", "A"}, "REFUSED", nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode)+" "+strings.Join(tt.args, " "), func(t *testing.T) {
			status, answers := dig(t, servers[tt.mode], tt.args...)
			assert.Equal(t, tt.status, status)
			assert.Equal(t, tt.answers, answers)
		})
	}
}

// TestDNSTCPAndTruncation pins the transport rules: an answer larger than
// a UDP client takes is truncated (TC, question only), and the same question
// over TCP gets all of it, length-prefixed; dig's own fallback does both.
func TestDNSTCPAndTruncation(t *testing.T) {
	zone := startZone(t)
	addr, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}}, zone)

	m, raw := query(t, "udp", addr, "big.test.", dnsmessage.TypeA, false)
	assert.True(t, m.Header.Truncated, "a 40-record answer does not fit 512 bytes")
	assert.Empty(t, m.Answers)
	require.Len(t, m.Questions, 1)
	assert.LessOrEqual(t, len(raw), dnsMinUDP)

	m, _ = query(t, "tcp", addr, "big.test.", dnsmessage.TypeA, false)
	assert.False(t, m.Header.Truncated)
	assert.Len(t, m.Answers, 40)

	m, raw = query(t, "udp", addr, "big.test.", dnsmessage.TypeA, true)
	assert.False(t, m.Header.Truncated, "an EDNS client takes %d bytes", len(raw))
	assert.Len(t, m.Answers, 40)

	status, answers := dig(t, addr, "+ignore", "+noedns", "big.test", "A") // +ignore: keep the truncated answer
	assert.Equal(t, "NOERROR", status)
	assert.Empty(t, answers)
	status, answers = dig(t, addr, "+noedns", "big.test", "A") // dig retries over TCP itself
	assert.Equal(t, "NOERROR", status)
	assert.Len(t, answers, 40)
	status, answers = dig(t, addr, "+tcp", "a.test", "A")
	assert.Equal(t, "NOERROR", status)
	assert.Equal(t, []string{"a.test. A 192.0.2.1"}, answers)
}

// TestDNSCache pins that a repeated question is answered from the cache,
// with the client's ID and spelling and the TTL it has left, and that the
// cache keeps no answer past its TTL.
func TestDNSCache(t *testing.T) {
	zone := startZone(t)
	fwd := &DNSForwarder{Servers: []string{zone.Addr}}
	// The clock is read by the server's goroutines: atomic, for the race
	// detector, which does not see the order the network gives.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	fwd.now = func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	addr, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}, Upstream: fwd}, zone)

	m, _ := query(t, "udp", addr, "a.test.", dnsmessage.TypeA, false)
	require.Len(t, m.Answers, 1)
	assert.EqualValues(t, 300, m.Answers[0].Header.TTL)
	require.EqualValues(t, 1, zone.UDP.Load())

	advance(100 * time.Second)
	m, _ = query(t, "udp", addr, "A.TeSt.", dnsmessage.TypeA, false)
	assert.EqualValues(t, 1, zone.UDP.Load(), "answered from the cache")
	assert.EqualValues(t, 0x4242, m.Header.ID)
	assert.Equal(t, "A.TeSt.", m.Questions[0].Name.String(), "the client's spelling of its question")
	require.Len(t, m.Answers, 1)
	assert.EqualValues(t, 200, m.Answers[0].Header.TTL, "the TTL it has left")

	query(t, "udp", addr, "short.test.", dnsmessage.TypeA, false)
	query(t, "udp", addr, "short.test.", dnsmessage.TypeA, false)
	assert.EqualValues(t, 2, zone.UDP.Load(), "second short.test from the cache")
	advance(3 * time.Second)
	query(t, "udp", addr, "short.test.", dnsmessage.TypeA, false)
	assert.EqualValues(t, 3, zone.UDP.Load(), "a 2 s TTL is asked again after 3 s")

	// dig sends a DNS cookie: an answer from the cache must not echo the
	// first client's, which dig would take for a forgery.
	for range 2 {
		host, port, _ := net.SplitHostPort(addr)
		out, err := exec.Command("dig", "@"+host, "-p", port, "+tries=1", "+time=4", "TXT", "a.test").CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "v=test1")
		assert.NotContains(t, string(out), "COOKIE mismatch")
		assert.NotContains(t, strings.ToLower(string(out)), "warning")
	}
	assert.EqualValues(t, 4, zone.UDP.Load(), "the second dig from the cache")

	// Negative answers are kept for their SOA's TTL.
	query(t, "udp", addr, "nowhere.test.", dnsmessage.TypeA, false)
	m, _ = query(t, "udp", addr, "nowhere.test.", dnsmessage.TypeA, false)
	assert.Equal(t, dnsmessage.RCodeNameError, m.Header.RCode)
	assert.EqualValues(t, 5, zone.UDP.Load())
}

// TestDNSCoalesces pins that the same question asked by many clients while
// it is on its way to a slow server is asked once, and each client gets the
// answer under its own ID.
func TestDNSCoalesces(t *testing.T) {
	zone := startZone(t)
	zone.Delay.Store(int64(300 * time.Millisecond))
	addr, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}}, zone)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			m, _ := query(t, "udp", addr, "a.test.", dnsmessage.TypeA, false)
			assert.EqualValues(t, 0x4242, m.Header.ID)
			assert.Len(t, m.Answers, 1)
		})
	}
	wg.Wait()
	assert.EqualValues(t, 1, zone.UDP.Load(), "one question reached the server")
}

// TestDNSCacheBounded pins the cache's bound on entries.
func TestDNSCacheBounded(t *testing.T) {
	zone := startZone(t)
	fwd := &DNSForwarder{Servers: []string{zone.Addr}, MaxEntries: 2}
	addr, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}, Upstream: fwd}, zone)
	for _, n := range []string{"a.test.", "allowed.test.", "private.test.", "a.test."} {
		query(t, "udp", addr, n, dnsmessage.TypeA, false)
	}
	assert.EqualValues(t, 4, zone.UDP.Load(), "a.test was evicted by the third name")
	fwd.mu.Lock()
	defer fwd.mu.Unlock()
	assert.LessOrEqual(t, fwd.lru.Len(), 2)
}

// TestDNSUpstreamFailure pins that a dead or missing name server is a
// prompt SERVFAIL, never a client's timeout.
func TestDNSUpstreamFailure(t *testing.T) {
	zone := startZone(t)
	zone.Silent.Store(true)
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	refusing := dead.LocalAddr().String()
	dead.Close() // nothing listens: ECONNREFUSED at once
	tests := []struct {
		name    string
		servers []string
		within  time.Duration
	}{
		{"no server at all", nil, time.Second},
		{"nothing listens", []string{refusing}, time.Second},
		{"server never answers", []string{zone.Addr}, 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fwd := &DNSForwarder{Servers: tt.servers, Timeout: time.Second, Deadline: 2 * time.Second}
			addr, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}, Upstream: fwd}, nil)
			status, _ := dig(t, addr, "a.test", "A")
			assert.Equal(t, "SERVFAIL", status)
		})
	}
}

// TestDNSAllowlistRecordsAnswers pins what the caught connections are
// judged by: under allowlist, the addresses answered for an allowed name
// (also at the end of a CNAME chain, under the name asked), and the hosts
// file's; nothing for a refused name or under public.
func TestDNSAllowlistRecordsAnswers(t *testing.T) {
	zone := startZone(t)
	answers := NewAnswers(0)
	hosts := map[string][]netip.Addr{"db.internal": {netip.MustParseAddr("172.18.0.5")}}
	addr, _ := startDNS(t, DNSConfig{Agent: allowTest(), Answers: answers, Hosts: hosts}, zone)
	query(t, "udp", addr, "www.allowed.test.", dnsmessage.TypeA, false)
	query(t, "udp", addr, "allowed.test.", dnsmessage.TypeAAAA, false)
	query(t, "udp", addr, "a.test.", dnsmessage.TypeA, false)

	assert.True(t, answers.Answered("www.allowed.test", netip.MustParseAddr("198.51.100.7")))
	assert.Equal(t, []string{"www.allowed.test"}, answers.NamesOf(netip.MustParseAddr("198.51.100.7")))
	assert.True(t, answers.Answered("allowed.test", netip.MustParseAddr("2001:db8::1")))
	assert.Empty(t, answers.NamesOf(netip.MustParseAddr("192.0.2.1")), "a.test was refused")
	assert.True(t, answers.Answered("db.internal", netip.MustParseAddr("172.18.0.5")), "the hosts file is pinned")

	// A question first answered under public and then asked under
	// allowlist is recorded from the cache.
	fwd := &DNSForwarder{Servers: []string{zone.Addr}}
	pub := startDNSWith(t, DNSConfig{Agent: Policy{Mode: Public}, Upstream: fwd, Answers: answers})
	strict := startDNSWith(t, DNSConfig{Agent: allowTest(), Upstream: fwd, Answers: answers})
	query(t, "udp", pub, "allowed.test.", dnsmessage.TypeA, false)
	assert.False(t, answers.Answered("allowed.test", netip.MustParseAddr("192.0.2.1")), "public records nothing")
	before := zone.UDP.Load()
	query(t, "udp", strict, "allowed.test.", dnsmessage.TypeA, false)
	assert.Equal(t, before, zone.UDP.Load(), "from the cache")
	assert.True(t, answers.Answered("allowed.test", netip.MustParseAddr("192.0.2.1")))
}

// TestDNSAllowlistFollowsChains pins that under allowlist the names a
// CNAME chain from an allowed name leads to may be asked for next, by the
// clients of that policy only, and open no address by themselves.
func TestDNSAllowlistFollowsChains(t *testing.T) {
	zone := startZone(t)
	answers := NewAnswers(0)
	verifier := make(chan bool, 1)
	addr, _ := startDNS(t, DNSConfig{Agent: allowTest(), Answers: answers,
		PolicyFor: func(string, netip.AddrPort) (string, Policy, bool) {
			if len(verifier) > 0 {
				return "verifier", allowTest(), true
			}
			return "", Policy{}, false
		}}, zone)
	rcode := func(name string) dnsmessage.RCode {
		m, _ := query(t, "udp", addr, name, dnsmessage.TypeA, false)
		return m.Header.RCode
	}
	assert.Equal(t, dnsmessage.RCodeNameError, rcode("edge.cdn.test."), "before the chain was answered")
	assert.Equal(t, dnsmessage.RCodeSuccess, rcode("www.allowed.test."))
	assert.Equal(t, dnsmessage.RCodeSuccess, rcode("edge.cdn.test."), "the chain's end, asked on its own")
	verifier <- true
	assert.Equal(t, dnsmessage.RCodeNameError, rcode("edge.cdn.test."), "another policy's clients did not follow that chain")
	<-verifier
	assert.Equal(t, []string{"edge.cdn.test", "www.allowed.test"}, answers.NamesOf(netip.MustParseAddr("198.51.100.7")),
		"the chain's end is recorded under its own name too, which no allowlist names")
}

func startDNSWith(t *testing.T, c DNSConfig) string {
	addr, _ := startDNS(t, c, nil)
	return addr
}

// TestDNSPolicyPerClient pins that the server asks PolicyFor for each
// query's policy (the verifier's queries are judged by the verifier's) and
// falls back to the agent's.
func TestDNSPolicyPerClient(t *testing.T) {
	zone := startZone(t)
	var asked []string
	verifierPort := make(chan uint16, 1)
	addr, _ := startDNS(t, DNSConfig{
		Agent: Policy{Mode: NoNetwork},
		PolicyFor: func(network string, client netip.AddrPort) (string, Policy, bool) {
			asked = append(asked, network)
			select {
			case p := <-verifierPort:
				if p == client.Port() {
					return "verifier", Policy{Mode: Public}, true
				}
			default:
			}
			return "", Policy{}, false
		},
	}, zone)
	c, err := net.Dial("udp", addr)
	require.NoError(t, err)
	defer c.Close()
	verifierPort <- uint16(c.LocalAddr().(*net.UDPAddr).Port)
	q := mustQuery(t, "a.test.", dnsmessage.TypeA)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write(q)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	require.NoError(t, err)
	var m dnsmessage.Message
	require.NoError(t, m.Unpack(buf[:n]))
	assert.Equal(t, dnsmessage.RCodeSuccess, m.Header.RCode, "the verifier's policy")

	m, _ = query(t, "tcp", addr, "a.test.", dnsmessage.TypeA, false)
	assert.Equal(t, dnsmessage.RCodeRefused, m.Header.RCode, "anyone else gets the agent's")
	assert.Equal(t, []string{"udp", "tcp"}, asked)
}

func mustQuery(t testing.TB, name string, typ dnsmessage.Type) []byte {
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	raw, err := msg.Pack()
	require.NoError(t, err)
	return raw
}

// TestDNSRefusalsAudited pins that each refusal lands in the audit log with
// its reason.
func TestDNSRefusalsAudited(t *testing.T) {
	dir := t.TempDir()
	audit, err := OpenAudit(dir, 0, 0)
	require.NoError(t, err)
	zone := startZone(t)
	strict, _ := startDNS(t, DNSConfig{Agent: allowTest(), Audit: audit}, zone)
	none, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: NoNetwork}, Audit: audit}, zone)
	query(t, "udp", strict, "a.test.", dnsmessage.TypeA, false)
	query(t, "tcp", none, "allowed.test.", dnsmessage.TypeMX, false)
	query(t, "udp", strict, "allowed.test.", dnsmessage.TypeA, false) // allowed: not audited
	require.NoError(t, audit.Close())
	data, err := os.ReadFile(filepath.Join(dir, "egress.log"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 2, "%s", data)
	assert.Contains(t, lines[0], `"host":"a.test"`)
	assert.Contains(t, lines[0], `"reason":"blocked-by-allowlist"`)
	assert.Contains(t, lines[0], `"method":"dns A"`)
	assert.Contains(t, lines[1], `"host":"allowed.test"`)
	assert.Contains(t, lines[1], `"reason":"no-network"`)
	assert.Contains(t, lines[1], `"method":"dns MX"`)
}

// TestDNSBadInput pins the answers to what is not a plain query: FORMERR
// and NOTIMP carry the client's ID, and responses and runts get nothing
// (answering a response would let two resolvers bounce forever); the server
// keeps serving after each.
func TestDNSBadInput(t *testing.T) {
	idle := dnsTCPIdle
	dnsTCPIdle = time.Second
	t.Cleanup(func() { dnsTCPIdle = idle })
	zone := startZone(t)
	addr, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}}, zone)
	good := mustQuery(t, "a.test.", dnsmessage.TypeA)
	twoQuestions := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(twoQuestions[4:], 2)
	notify := append([]byte(nil), good...)
	notify[2] |= 4 << 3 // opcode NOTIFY
	response := append([]byte(nil), good...)
	response[2] |= 0x80
	tests := []struct {
		name  string
		raw   []byte
		rcode int // -1: no answer
	}{
		{"runt", []byte{1, 2, 3}, -1},
		{"a response", response, -1},
		{"two questions", twoQuestions, int(dnsmessage.RCodeFormatError)},
		{"cut question", good[:len(good)-2], int(dnsmessage.RCodeFormatError)},
		{"NOTIFY", notify, int(dnsmessage.RCodeNotImplemented)},
		{"compressed question", []byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0xc0, 12, 0, 1, 0, 1}, int(dnsmessage.RCodeFormatError)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.rcode < 0 {
				c, err := net.Dial("udp", addr)
				require.NoError(t, err)
				defer c.Close()
				c.Write(tt.raw)
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				_, err = c.Read(make([]byte, 512))
				assert.Error(t, err, "no answer")
			} else {
				resp := exchangeRaw(t, "udp", addr, tt.raw)
				require.GreaterOrEqual(t, len(resp), dnsHeaderLen)
				assert.EqualValues(t, 7, binary.BigEndian.Uint16(resp))
				assert.Equal(t, tt.rcode, int(resp[3]&0xf))
				assert.NotZero(t, resp[2]&0x80, "QR set")
			}
			m, _ := query(t, "udp", addr, "a.test.", dnsmessage.TypeA, false)
			assert.Len(t, m.Answers, 1, "still serving")
		})
	}
	// A TCP client that sends half a message is cut off at the idle
	// deadline, not held; one that sends garbage framing is closed.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.Write([]byte{0, 40, 1, 2})
	c.Write(append([]byte{0, byte(len(good))}, good...))
	c.SetReadDeadline(time.Now().Add(dnsTCPIdle + 5*time.Second))
	_, err = c.Read(make([]byte, 10))
	assert.Error(t, err, "the server closed the connection")
}

// TestNslookup drives nslookup (dnsutils) as a second real client.
func TestNslookup(t *testing.T) {
	if _, err := exec.LookPath("nslookup"); err != nil {
		sandboxtest.Need(t, "nslookup (dnsutils; scripts/deps.sh test)")
	}
	zone := startZone(t)
	pub, _ := startDNS(t, DNSConfig{Agent: Policy{Mode: Public}}, zone)
	strict, _ := startDNS(t, DNSConfig{Agent: allowTest()}, zone)
	run := func(addr, name string) (string, error) {
		host, port, _ := net.SplitHostPort(addr)
		out, err := exec.Command("nslookup", "-port="+port, "-timeout=4", "-retry=1", name, host).CombinedOutput()
		return string(out), err
	}
	out, err := run(pub, "a.test")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Address: 192.0.2.1")
	assert.Contains(t, out, "Address: 2001:db8::1")
	out, err = run(strict, "a.test")
	assert.Error(t, err)
	assert.Contains(t, out, "NXDOMAIN")
	// nslookup then asks for the chain's end itself (edge.cdn.test AAAA),
	// which the allowlist does not name, but the chain from an allowed
	// name led to.
	out, err = run(strict, "www.allowed.test")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "NXDOMAIN")
	assert.Contains(t, out, "canonical name = edge.cdn.test.")
	assert.Contains(t, out, "Address: 198.51.100.7")
}
