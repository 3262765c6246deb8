package netrules

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

// A batch the kernel refuses gives the kernel's error, and the rules'
// socket still serves the next batch: the refused batch's answers that
// were not read are told from the next one's by their sequence numbers.
func TestTheKernelsRefusalIsReportedAndTheSocketStaysUsable(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rules, err := Apply(ctx, sb.Target, Plan{Catch: netip.MustParseAddrPort("127.0.0.1:3130"), Answered: true})
	require.NoError(t, err)

	elems := []nftables.SetElement{{Key: []byte{10, 1, 2, 3}}, {Key: []byte{10, 1, 2, 4}}}
	msgs, err := nftMessages(func(c *nftables.Conn) error {
		absent := &nftables.Set{Table: ipv4Table, Name: "absent", KeyType: nftables.TypeIPAddr}
		if err := c.SetAddElements(absent, elems); err != nil {
			return err
		}
		// A second refusal in the same batch, which the kernel answers
		// after exchange has returned the first.
		return c.SetAddElements(&nftables.Set{Table: ipv4Table, Name: "absent-too", KeyType: nftables.TypeIPAddr}, elems)
	})
	require.NoError(t, err)
	err = rules.nft.exchange(msgs)
	require.ErrorIs(t, err, unix.ENOENT, "a set that does not exist")

	require.NoError(t, rules.AddAnswered([]netip.Addr{netip.MustParseAddr("10.1.2.5")}))
	// The same element twice in a set is refused by nothing: both
	// requests are acknowledged.
	require.NoError(t, rules.AddAnswered([]netip.Addr{netip.MustParseAddr("10.1.2.5")}))
	assert.Nil(t, (&Rules{}).AddAnswered([]netip.Addr{netip.MustParseAddr("2001:db8::1")}), "IPv6 is left out, so there is nothing to add")
	assert.Error(t, (&Rules{}).AddAnswered([]netip.Addr{netip.MustParseAddr("10.1.2.6")}), "rules never installed")

	require.NoError(t, rules.Close())
	assert.ErrorContains(t, rules.AddAnswered([]netip.Addr{netip.MustParseAddr("10.1.2.7")}), "closed", "an addition after Close")
	assert.NoError(t, rules.Close(), "a second Close")
}
