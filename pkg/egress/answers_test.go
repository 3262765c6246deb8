package egress

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clockedAnswers is a table whose clock the test moves.
func clockedAnswers(capacity int) (*Answers, *time.Time) {
	a := NewAnswers(capacity)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	return a, &now
}

func TestAnswersLookups(t *testing.T) {
	a, _ := clockedAnswers(0)
	web := netip.MustParseAddr("93.184.216.34")
	v6 := netip.MustParseAddr("2606:2800:220:1::1")
	a.Record("example.com", []netip.Addr{web, v6}, time.Minute)
	a.Record("www.example.com", []netip.Addr{web}, time.Minute)

	tests := []struct {
		name string
		host string
		addr netip.Addr
		want bool
	}{
		{"answered v4", "example.com", web, true},
		{"answered v6", "example.com", v6, true},
		{"v4-mapped form of an answered address", "example.com", netip.MustParseAddr("::ffff:93.184.216.34"), true},
		{"second name for the same address", "www.example.com", web, true},
		{"name not answered with that address", "www.example.com", v6, false},
		{"address never answered", "example.com", netip.MustParseAddr("1.2.3.4"), false},
		{"name never answered", "other.example", web, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, a.Answered(tt.host, tt.addr))
		})
	}
	assert.Equal(t, []string{"example.com", "www.example.com"}, a.NamesOf(web))
	assert.Equal(t, []string{"example.com"}, a.NamesOf(v6))
	assert.Empty(t, a.NamesOf(netip.MustParseAddr("1.2.3.4")))
}

func TestAnswersLife(t *testing.T) {
	addr := netip.MustParseAddr("203.0.113.7")
	tests := []struct {
		name    string
		ttl     time.Duration
		after   time.Duration
		hold    bool
		release bool
		want    bool
	}{
		{"short TTL lasts an hour", 30 * time.Second, 59 * time.Minute, false, false, true},
		{"short TTL gone after an hour", 30 * time.Second, MinAnswerLife, false, false, false},
		{"long TTL lasts its TTL", 3 * time.Hour, 2 * time.Hour, false, false, true},
		{"long TTL gone after its TTL", 3 * time.Hour, 3 * time.Hour, false, false, false},
		{"held connection keeps it", time.Second, 5 * time.Hour, true, false, true},
		{"released connection lets it expire", time.Second, 5 * time.Hour, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, now := clockedAnswers(0)
			a.Record("api.example", []netip.Addr{addr}, tt.ttl)
			var release func()
			if tt.hold {
				release = a.Hold(addr)
			}
			*now = now.Add(tt.after)
			if tt.release {
				release()
				release() // a second call changes nothing
			}
			assert.Equal(t, tt.want, a.Answered("api.example", addr))
			if tt.want {
				assert.Equal(t, []string{"api.example"}, a.NamesOf(addr))
			} else {
				assert.Empty(t, a.NamesOf(addr))
			}
		})
	}
}

func TestAnswersRecordExtends(t *testing.T) {
	a, now := clockedAnswers(0)
	addr := netip.MustParseAddr("198.51.100.1")
	a.Record("a.example", []netip.Addr{addr}, 0)
	*now = now.Add(50 * time.Minute)
	a.Record("a.example", []netip.Addr{addr}, 0) // answered again
	*now = now.Add(50 * time.Minute)
	assert.True(t, a.Answered("a.example", addr), "a second answer restarts the hour")
	assert.Equal(t, 1, a.Len())
}

func TestAnswersBounded(t *testing.T) {
	a, _ := clockedAnswers(4)
	held := netip.MustParseAddr("10.0.0.1")
	a.Record("held.example", []netip.Addr{held}, time.Hour)
	release := a.Hold(held)
	defer release()
	for i := range 20 {
		a.Record(fmt.Sprintf("n%d.example", i), []netip.Addr{netip.AddrFrom4([4]byte{10, 1, 0, byte(i)})}, time.Hour)
		require.LessOrEqual(t, a.Len(), 4)
	}
	assert.True(t, a.Answered("held.example", held), "a held address outlives newer unheld ones")
	assert.True(t, a.Answered("n19.example", netip.AddrFrom4([4]byte{10, 1, 0, 19})), "the newest stays")
	assert.False(t, a.Answered("n0.example", netip.AddrFrom4([4]byte{10, 1, 0, 0})), "the oldest unheld went first")
}

func TestAnswersNil(t *testing.T) {
	var a *Answers
	a.Record("x.example", []netip.Addr{netip.MustParseAddr("1.1.1.1")}, time.Hour)
	assert.False(t, a.Answered("x.example", netip.MustParseAddr("1.1.1.1")))
	assert.Empty(t, a.NamesOf(netip.MustParseAddr("1.1.1.1")))
	a.Hold(netip.MustParseAddr("1.1.1.1"))()
}

// TestAnswersConcurrent is for the race detector: resolver and listener use
// one table from many goroutines.
func TestAnswersConcurrent(t *testing.T) {
	a := NewAnswers(64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
				a.Record(fmt.Sprintf("h%d.example", g), []netip.Addr{addr}, time.Minute)
				release := a.Hold(addr)
				a.Answered(fmt.Sprintf("h%d.example", g), addr)
				a.NamesOf(addr)
				release()
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, a.Len(), 64)
}
