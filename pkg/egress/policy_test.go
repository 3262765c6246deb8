package egress

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name    string
		mode    string
		hosts   []string
		cidrs   []string
		want    Policy
		wantErr string // substring; "" means success
	}{
		{name: "public", mode: "public", want: Policy{Mode: Public}},
		{name: "no-network", mode: "no-network", want: Policy{Mode: NoNetwork}},
		{name: "allowlist normalized", mode: "allowlist",
			hosts: []string{"PyPI.org.", "*.Files.PythonHosted.org", "*.bücher.example", "10.1.2.3", "[2001:DB8::1]"},
			want: Policy{Mode: Allowlist, AllowedHosts: []string{
				"pypi.org", "*.files.pythonhosted.org", "*.xn--bcher-kva.example", "10.1.2.3", "2001:db8::1"}}},
		{name: "cidrs masked, bare address is one host", mode: "public", cidrs: []string{"127.0.0.1/8", "10.9.8.7"},
			want: Policy{Mode: Public, AllowCIDRs: []netip.Prefix{
				netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.9.8.7/32")}}},
		{name: "unknown mode", mode: "open", wantErr: `use "public", "allowlist" or "no-network"`},
		{name: "empty allowlist", mode: "allowlist", wantErr: "add --allow-host NAME or use"},
		{name: "hosts under public", mode: "public", hosts: []string{"a.example"}, wantErr: "drop --allow-host"},
		{name: "hosts under no-network", mode: "no-network", hosts: []string{"a.example"}, wantErr: "takes no --allow-host"},
		{name: "lone wildcard", mode: "allowlist", hosts: []string{"*"}, wantErr: "use --network public"},
		{name: "inner wildcard", mode: "allowlist", hosts: []string{"a.*.example"}, wantErr: `leading "*."`},
		{name: "wildcard without dot", mode: "allowlist", hosts: []string{"*example.com"}, wantErr: `leading "*."`},
		{name: "port given", mode: "allowlist", hosts: []string{"example.com:443"}, wantErr: "not allowed in a host name"},
		{name: "empty label", mode: "allowlist", hosts: []string{"a..example"}, wantErr: "empty label"},
		{name: "wildcard on an address", mode: "allowlist", hosts: []string{"*.1.2.3.4"}, wantErr: "cannot apply to an IP address"},
		{name: "bad cidr", mode: "public", cidrs: []string{"10.0.0.0/33"}, wantErr: "want a range like"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicy(tt.mode, tt.hosts, tt.cidrs)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAllowsHost(t *testing.T) {
	p, err := ParsePolicy("allowlist", []string{"pypi.org", "*.example.com", "*.bücher.example", "192.0.2.7"}, nil)
	require.NoError(t, err)
	tests := []struct {
		host string
		want bool
	}{
		{"pypi.org", true},
		{"PYPI.ORG.", true},
		{"www.pypi.org", false}, // exact names do not cover subdomains
		{"example.com", false},  // *.suffix covers subdomains, not the apex
		{"a.example.com", true},
		{"A.B.Example.Com.", true},
		{"aexample.com", false},
		{"example.com.evil.net", false},
		{"xn--bcher-kva.example", false},
		{"shop.bücher.example", true},
		{"shop.xn--bcher-kva.example", true},
		{"SHOP.BÜCHER.EXAMPLE", true},
		{"192.0.2.7", true},
		{"192.0.2.8", false},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			h, err := NormalizeHost(tt.host)
			require.NoError(t, err)
			assert.Equal(t, tt.want, p.AllowsHost(h), "normalized %q", h)
		})
	}
	assert.True(t, Policy{Mode: Public}.AllowsHost("anything.example"))
	assert.False(t, Policy{Mode: NoNetwork}.AllowsHost("anything.example"))
}

func TestNormalizeHostRefusesJunk(t *testing.T) {
	for _, h := range []string{"", ".", "a b", "a/b", "a@b", "a%2eb", "fe80::1%eth0", "[10.0.0.1]", "a..b", "-\x00"} {
		_, err := NormalizeHost(h)
		assert.Error(t, err, "%q", h)
	}
}

// Non-global destinations are refused even under public
// (docs/failures.md#non-global-destinations-refused-even-under-public).
func TestNonGlobalRefusedUnderPublic(t *testing.T) {
	refused := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.8.9.10",
		"169.254.169.254", "169.254.0.1", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.0.2.1",
		"192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.1", "198.51.100.1", "203.0.113.5",
		"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		"::", "::1", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "ff0e::1", "100::1", "::a00:1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", // IPv4-mapped
		"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b:1::1", // NAT64 of metadata, loopback; local-use NAT64
		"2002:a9fe:a9fe::1", "2002:0a00:0001::1", "2002:7f00:1::1", // 6to4 of metadata, private, loopback
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", // Teredo
		"2001:db8::1", "3fff::1", "2001:2::1", "5f00::1",
	}
	allowed := []string{
		"1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.1", "172.32.0.1", "192.169.0.1", "198.20.0.1",
		"2606:4700:4700::1111", "2a00:1450:4001::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
	}
	p := Policy{Mode: Public}
	for _, s := range refused {
		err := p.CheckAddr(netip.MustParseAddr(s))
		assert.ErrorIs(t, err, ErrBlockedAddress, "%s must be refused", s)
	}
	for _, s := range allowed {
		assert.NoError(t, p.CheckAddr(netip.MustParseAddr(s)), "%s must pass", s)
	}
}

func TestAllowCIDROpensRangeDeliberately(t *testing.T) {
	p, err := ParsePolicy("public", nil, []string{"127.0.0.0/8", "fd00:1::/64"})
	require.NoError(t, err)
	assert.NoError(t, p.CheckAddr(netip.MustParseAddr("127.0.0.1")))
	assert.NoError(t, p.CheckAddr(netip.MustParseAddr("::ffff:127.0.0.1")))
	assert.NoError(t, p.CheckAddr(netip.MustParseAddr("fd00:1::5")))
	assert.ErrorIs(t, p.CheckAddr(netip.MustParseAddr("169.254.169.254")), ErrBlockedAddress)
	assert.ErrorIs(t, p.CheckAddr(netip.MustParseAddr("fd00:2::5")), ErrBlockedAddress)
}

func TestOwnAddressesRefusedEvenInsideAllowCIDRs(t *testing.T) {
	s := (&Proxy{Own: []netip.Addr{netip.MustParseAddr("8.8.4.4"), netip.MustParseAddr("127.0.0.9")}}).withDefaults()
	pol := publicLoopback()
	for _, a := range []string{"8.8.4.4", "::ffff:8.8.4.4", "64:ff9b::808:404", "2002:808:404::1", "127.0.0.9"} {
		assert.ErrorIs(t, s.checkAddr(pol, netip.MustParseAddr(a)), ErrBlockedAddress, a)
	}
	assert.NoError(t, s.checkAddr(pol, netip.MustParseAddr("127.0.0.1")))
}
