package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/netrules"
)

// A peer is placed on 127.0.0.1:PORT, or on the next 127.0.0.N when that
// port is a proxy's or another peer's; the hosts file adds the peers to the
// substrate's entries, and the agent's environment lists each in no_proxy
// (docs/failures.md#peers-listed-one-by-one).
func TestPlanPlacesPeersAndNamesThem(t *testing.T) {
	w, err := Plan(Network{Agent: Policy{Mode: Public}, ProxyEnv: true, Peers: []PeerSpec{
		{Name: "db", Port: 5432},
		{Name: "squatter", Port: AgentProxyPort},
		{Name: "replica", Port: 5432, Target: "10.0.0.1:5432"},
	}})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"db=127.0.0.1:5432->127.0.0.1:5432",
		"squatter=127.0.0.2:3128->127.0.0.1:3128",
		"replica=127.0.0.2:5432->10.0.0.1:5432",
	}, w.Peers())
	assert.True(t, strings.HasSuffix(string(w.Hosts()), "127.0.0.1\tdb\n127.0.0.2\tsquatter\n127.0.0.2\treplica\n"), "%s", w.Hosts())
	files := w.AgentFiles()
	require.NotEmpty(t, files)
	assert.Equal(t, File{Path: "/etc/hosts", Data: w.Hosts()}, files[0])
	assert.Contains(t, w.AgentEnv(), "no_proxy=localhost,127.0.0.1,::1,db,squatter,127.0.0.2,replica")
	assert.Contains(t, w.AgentEnv(), "http_proxy=http://127.0.0.1:3128")
}

// Without ProxyEnv the agent's environment names no proxy, as under
// Docker: its connections are caught without it.
func TestPlanSetsNoProxyVariablesByDefault(t *testing.T) {
	served := resolverServed
	t.Cleanup(func() { resolverServed = served })
	resolverServed = false
	w, err := Plan(Network{Agent: Policy{Mode: Public}})
	require.NoError(t, err)
	assert.Contains(t, w.AgentEnv(), "http_proxy=http://127.0.0.1:3128", "without a resolver of its own, the sandbox resolves names only through the proxy")
	resolverServed = true
	w, err = Plan(Network{Agent: Policy{Mode: Public}})
	require.NoError(t, err)
	assert.Nil(t, w.AgentEnv())
	for _, f := range w.AgentFiles() {
		assert.NotContains(t, f.Path, "apt")
	}
}

// Under no-network the agent's programs are told of no proxy, and nothing
// but the peers' names and the sandbox's resolver go into the agent's view.
func TestPlanUnderNoNetworkSetsNoProxy(t *testing.T) {
	w, err := Plan(Network{Agent: Policy{Mode: NoNetwork}})
	require.NoError(t, err)
	assert.Nil(t, w.AgentEnv())
	assert.Nil(t, w.Hosts())
	for _, f := range w.AgentFiles() {
		assert.Equal(t, "/etc/resolv.conf", f.Path, "only the resolver, which refuses every query")
	}
	env, done := w.OpenVisit(Policy{Mode: NoNetwork})
	assert.Nil(t, env)
	done()
}

func TestPlanRefusesBadPeers(t *testing.T) {
	for _, peers := range [][]PeerSpec{
		{{Name: "db", Port: 0}},
		{{Name: "db", Port: 70000}},
		{{Name: "", Port: 80}},
		{{Name: "db", Port: 80}, {Name: "DB", Port: 81}},
	} {
		_, err := Plan(Network{Agent: Policy{Mode: Public}, Peers: peers})
		assert.Error(t, err, "%+v", peers)
	}
}

// Start makes every listener at once; one that cannot be made fails the
// start, names its address, and closes the ones that were made.
func TestStartFailsOnAListenerAndClosesTheOthers(t *testing.T) {
	w, err := Plan(Network{Agent: Policy{Mode: Public}, Peers: []PeerSpec{{Name: "db", Port: 5432}}})
	require.NoError(t, err)
	var made []net.Listener
	listen := func(ctx context.Context, addrs []netip.AddrPort) ([]net.Listener, []error, error) {
		lns, errs := make([]net.Listener, len(addrs)), make([]error, len(addrs))
		for i, a := range addrs {
			if a.Port() == VisitorProxyPort {
				errs[i] = errors.New("address already in use")
				continue
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			lns[i] = ln
			made = append(made, ln)
		}
		return lns, errs, nil
	}
	err = w.Start(context.Background(), StartConfig{Listen: listen, AuditDir: t.TempDir(), Resolver: resolverOf()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "listen on 127.0.0.1:3129 inside the sandbox")
	require.Len(t, made, 2)
	for _, ln := range made {
		_, err := ln.Accept()
		assert.ErrorIs(t, err, net.ErrClosed, "a listener made before the failure was left open")
	}
	w.Close()
}

// A started wiring serves a visit only with the visit's token, and stops
// with its context.
func TestStartServesVisitsUntilItsContextEnds(t *testing.T) {
	w, err := Plan(Network{Agent: Policy{Mode: NoNetwork}, Verifier: Policy{Mode: Public}})
	require.NoError(t, err)
	var visitor net.Listener
	listen := func(ctx context.Context, addrs []netip.AddrPort) ([]net.Listener, []error, error) {
		require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3129")}, addrs, "no agent proxy under no-network")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		visitor = ln
		return []net.Listener{ln}, []error{nil}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, w.Start(ctx, StartConfig{Listen: listen, AuditDir: t.TempDir(), Resolver: resolverOf()}))
	env, done := w.OpenVisit(Policy{Mode: Public})
	assert.Contains(t, strings.Join(env, "\n"), "http_proxy=http://visit:")
	done()
	cancel()
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once Start's context ended")
	}
	_, err = visitor.Accept()
	assert.Error(t, err)
}

// Where the rules that catch connections cannot be installed, Start fails
// and says what to do; with AllowDegraded it serves the explicit proxy
// alone, points the agent at it, and Degraded says why
// (docs/failures.md#no-rules-no-start).
func TestStartFailsClosedWithoutTheRules(t *testing.T) {
	loopbackListen := loopbackListeners(t)
	refused := func(ctx context.Context, plan netrules.Plan) error {
		assert.Equal(t, "127.0.0.1:3130", plan.Catch.String())
		return &netrules.Error{Step: "install the nftables rules", Err: errors.New("operation not supported")}
	}
	served := resolverServed
	t.Cleanup(func() { resolverServed = served })
	resolverServed = true
	for _, degrade := range []bool{false, true} {
		w, err := Plan(Network{Agent: Policy{Mode: Public}})
		require.NoError(t, err)
		require.Nil(t, w.AgentEnv())
		ctx, cancel := context.WithCancel(context.Background())
		err = w.Start(ctx, StartConfig{Listen: loopbackListen, AuditDir: t.TempDir(), Resolver: resolverOf(), Catch: refused, AllowDegraded: degrade})
		if !degrade {
			require.Error(t, err)
			assert.Contains(t, err.Error(), "operation not supported")
			assert.Contains(t, err.Error(), "--allow-degraded")
			assert.Empty(t, w.Degraded())
		} else {
			require.NoError(t, err)
			assert.Contains(t, w.Degraded(), "outbound connections are not caught")
			assert.Contains(t, w.AgentEnv(), "http_proxy=http://127.0.0.1:3128")
		}
		cancel()
		w.Close()
	}
}

// Where the verifier's policy is not the agent's, the caught connections
// and queries of a visit must be told from the agent's (sock_diag inside
// the sandbox). Without that socket Start fails and says what to do, rather
// than judge the verifier's connections by the agent's policy; with
// AllowDegraded it goes on. Under one policy for both, nothing needs telling
// apart, and Start goes on.
func TestStartFailsClosedWithoutAttribution(t *testing.T) {
	loopbackListen := loopbackListeners(t)
	installed := func(ctx context.Context, plan netrules.Plan) error { return nil }
	noDiag := func(ctx context.Context, proto int) (*os.File, error) {
		return nil, errors.New("protocol not supported")
	}
	for _, tc := range []struct {
		name     string
		net      Network
		degraded bool
		fails    bool
	}{
		{"stricter verifier", Network{Agent: Policy{Mode: Public}, Verifier: Policy{Mode: NoNetwork}}, false, true},
		{"looser verifier", Network{Agent: Policy{Mode: NoNetwork}, Verifier: Policy{Mode: Public}}, false, true},
		{"allowed degraded", Network{Agent: Policy{Mode: Public}, Verifier: Policy{Mode: NoNetwork}}, true, false},
		{"one policy", Network{Agent: Policy{Mode: Public}, Verifier: Policy{Mode: Public}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Plan(tc.net)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err = w.Start(ctx, StartConfig{Listen: loopbackListen, AuditDir: t.TempDir(), Resolver: resolverOf(),
				Catch: installed, Netlink: noDiag, AllowDegraded: tc.degraded})
			if tc.fails {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "protocol not supported")
				assert.Contains(t, err.Error(), "--allow-degraded")
				return
			}
			require.NoError(t, err)
			cancel()
			w.Close()
		})
	}
}

// loopbackListeners is a StartConfig.Listen that makes each listener on a
// free loopback port.
func loopbackListeners(t *testing.T) func(context.Context, []netip.AddrPort) ([]net.Listener, []error, error) {
	return func(ctx context.Context, addrs []netip.AddrPort) ([]net.Listener, []error, error) {
		lns := make([]net.Listener, len(addrs))
		for i := range addrs {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			lns[i] = ln
		}
		return lns, make([]error, len(addrs)), nil
	}
}
