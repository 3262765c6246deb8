package netrules_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/netrules"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// The addresses below never leave the sandbox: its namespace has loopback
// alone, and every connection to them is caught or refused there.
var (
	catchAddr = netip.MustParseAddrPort("127.0.0.1:3130")
	// caught is a private address nothing in the sandbox listens on.
	caught = netip.MustParseAddrPort("10.213.78.2:8080")
)

// sandboxWithRules starts a sandbox, makes the transparent listener inside
// and installs the rules with plan (Catch filled in).
func sandboxWithRules(t *testing.T, plan netrules.Plan) (*sandboxtest.Sandbox, net.Listener, *netrules.Rules) {
	t.Helper()
	sb := sandboxtest.Start(t, bwrap.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lns, errs, err := sb.Target.Listen(ctx, []netip.AddrPort{catchAddr})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	t.Cleanup(func() { lns[0].Close() })
	plan.Catch = catchAddr
	rules, err := netrules.Apply(ctx, sb.Target, plan)
	require.NoError(t, err)
	t.Cleanup(func() { rules.Close() })
	return sb, lns[0], rules
}

// Every TCP connection to a non-loopback address reaches the listener,
// which reads where it was going; a refused range gets ECONNREFUSED before
// the handshake and never reaches the listener; UDP other than DNS is
// rejected at once (a local sender sees EPERM: the packet is dropped in
// its own output path); IPv6 has no route.
func TestRulesCatchTCPAndRejectTheRest(t *testing.T) {
	sb, ln, _ := sandboxWithRules(t, netrules.Plan{
		Refused: []netrules.Range{{From: netip.MustParseAddr("10.99.0.0"), To: netip.MustParseAddr("10.99.255.255")}},
	})
	got := make(chan netip.AddrPort, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ap, err := netrules.OriginalDst(c)
			if err != nil {
				t.Errorf("original destination: %v", err)
			}
			got <- ap
			c.Write([]byte("caught\n"))
			c.Close()
		}
	}()
	script := fmt.Sprintf(`
import socket, errno, sys
s = socket.create_connection((%q, %d), timeout=5)
print(s.recv(100).decode().strip())
for target, what in (((%q, 80), "refused"), ):
    try:
        socket.create_connection(target, timeout=5)
        print(what, "connected")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.connect(("10.213.78.2", 9999))
try:
    u.send(b"x")
    u.recv(10)
    print("udp answered")
except OSError as e:
    print("udp", errno.errorcode[e.errno])
try:
    socket.create_connection(("2001:db8::1", 80), timeout=5)
except OSError as e:
    print("ipv6", errno.errorcode[e.errno])
`, caught.Addr().String(), caught.Port(), "10.99.1.1")
	r := sb.Run(t, "1000", nil, "python3", "-c", script)
	require.Equal(t, 0, r.Code, "%s%s", r.Stdout, r.Stderr)
	assert.Equal(t, "caught\nrefused ECONNREFUSED\nudp EPERM\nipv6 ENETUNREACH\n", r.Stdout)
	select {
	case ap := <-got:
		assert.Equal(t, caught, ap)
	case <-time.After(5 * time.Second):
		t.Fatal("the listener caught nothing")
	}
	assert.Empty(t, got, "a refused connection reached the listener")
}

// A connection made straight to the listener's own port is refused, not
// looped back into it.
func TestRulesRefuseDirectConnectionsToTheListener(t *testing.T) {
	sb, _, _ := sandboxWithRules(t, netrules.Plan{})
	r := sb.Sh(t, "0", fmt.Sprintf(`python3 -c '
import socket, errno
try:
    socket.create_connection(("127.0.0.1", %d), timeout=5); print("connected")
except OSError as e:
    print(errno.errorcode[e.errno])'`, catchAddr.Port()))
	assert.Equal(t, "ECONNREFUSED\n", r.Stdout, r.Stderr)
}

const roleTamper = "netrules-tamper"

func init() { childproc.Add(roleTamper, tamper) }

// tamper tries, as the agent's root, what would undo the rules: flush the
// ruleset, delete the table, delete the default route.
func tamper(args []string) int {
	c, err := nftables.New()
	if err != nil {
		fmt.Println("open:", err)
		return 0
	}
	c.FlushRuleset()
	fmt.Println("flush:", c.Flush())
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: netrules.TableName})
	fmt.Println("delete table:", c.Flush())
	return 0
}

// The sandbox's root cannot change the rules or the route: CAP_NET_ADMIN
// is outside every session's bounding set.
func TestRootInTheSandboxCannotChangeTheRules(t *testing.T) {
	sb, ln, _ := sandboxWithRules(t, netrules.Plan{})
	self, err := os.Executable()
	require.NoError(t, err)
	r := sb.Run(t, "0", []string{"PATH=" + childproc.DefaultPath, childproc.Env + "=" + roleTamper}, self)
	assert.Contains(t, r.Stdout, "flush: netlink receive: operation not permitted", r.Stderr)
	assert.Contains(t, r.Stdout, "delete table: netlink receive: operation not permitted")
	r = sb.Sh(t, "0", "ip route del default; ip route")
	assert.Contains(t, r.Stderr, "Operation not permitted")
	assert.Contains(t, r.Stdout, "default dev lo scope link src 127.0.0.1")
	// Still caught.
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("caught\n"))
			c.Close()
		}
	}()
	r = sb.Sh(t, "1000", fmt.Sprintf(`python3 -c 'import socket; print(socket.create_connection((%q, %d), timeout=5).recv(9).decode())'`, caught.Addr(), caught.Port()))
	assert.Equal(t, "caught\n\n", r.Stdout, r.Stderr)
}

// With an answered set, a connection to an address not in it is refused
// before the handshake; once the daemon adds the address, it is caught.
func TestRulesRefuseWhatWasNeverAnswered(t *testing.T) {
	sb, ln, rules := sandboxWithRules(t, netrules.Plan{Answered: true})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("caught\n"))
			c.Close()
		}
	}()
	probe := fmt.Sprintf(`python3 -c '
import socket, errno
try:
    print(socket.create_connection((%q, %d), timeout=5).recv(9).decode().strip())
except OSError as e:
    print(errno.errorcode[e.errno])'`, caught.Addr(), caught.Port())
	r := sb.Sh(t, "1000", probe)
	assert.Equal(t, "ECONNREFUSED\n", r.Stdout, r.Stderr)
	require.NoError(t, rules.AddAnswered([]netip.Addr{caught.Addr(), netip.MustParseAddr("2001:db8::1")}))
	r = sb.Sh(t, "1000", probe)
	assert.Equal(t, "caught\n", r.Stdout, r.Stderr)
}

// BenchmarkAddAnswered is what the first answer of a new address costs
// under allowlist before it leaves the resolver: one batch on the rules'
// socket inside the sandbox.
func BenchmarkAddAnswered(b *testing.B) {
	sb := sandboxtest.Start(b, bwrap.Config{})
	ctx := context.Background()
	rules, err := netrules.Apply(ctx, sb.Target, netrules.Plan{Catch: catchAddr, Answered: true})
	require.NoError(b, err)
	defer rules.Close()
	i := 0
	for b.Loop() {
		i++
		a := netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})
		if err := rules.AddAnswered([]netip.Addr{a}); err != nil {
			b.Fatal(err)
		}
	}
}

// Every rejected packet that is not TCP is logged to the plan's nflog
// group, which the daemon reads for the audit through a socket a forked
// copy opened inside (join.Target.Netlink).
func TestRejectedPacketsAreLogged(t *testing.T) {
	sb, _, _ := sandboxWithRules(t, netrules.Plan{LogGroup: 7})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := sb.Target.Netlink(ctx, unix.NETLINK_NETFILTER)
	require.NoError(t, err)
	got := make(chan netrules.Rejected, 16)
	errc := make(chan error, 1)
	go func() { errc <- netrules.ReadRejected(ctx, f, 7, func(r netrules.Rejected) { got <- r }) }()
	select {
	case err := <-errc:
		t.Fatalf("reading the log: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	r := sb.Sh(t, "1000", `python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: s.sendto(b"x", ("10.213.78.2", 9999))
except OSError as e: print(type(e).__name__)'`)
	assert.Equal(t, "PermissionError\n", r.Stdout, r.Stderr)
	select {
	case rej := <-got:
		assert.Equal(t, uint8(unix.IPPROTO_UDP), rej.Proto)
		assert.Equal(t, "10.213.78.2:9999", rej.Dst.String())
		assert.Equal(t, "127.0.0.1", rej.Src.Addr().String())
	case <-time.After(5 * time.Second):
		t.Fatal("the rejected datagram was not logged")
	}
}
