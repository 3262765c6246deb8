package records

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Output without a terminal: the client gets all of it, the record the
// end of each stream inline and the whole in files beside the records.
func TestCaptureKeepsTailInlineAndAllInFiles(t *testing.T) {
	l, err := Open(t.TempDir())
	require.NoError(t, err)
	c := l.Capture("id1")
	var client bytes.Buffer
	out, errw := c.Stdout(&client), c.Stderr(&client)
	big := strings.Repeat("x", MaxInline) + "the end\n"
	_, err = out.Write([]byte(big))
	require.NoError(t, err)
	_, err = errw.Write([]byte("oops\n"))
	require.NoError(t, err)
	o := c.Close()
	assert.Equal(t, big+"oops\n", client.String())
	assert.Len(t, o.Stdout, MaxInline)
	assert.True(t, strings.HasSuffix(o.Stdout, "the end\n"))
	assert.Equal(t, "oops\n", o.Stderr)
	assert.Equal(t, int64(len(big)), o.StdoutBytes)
	whole, err := os.ReadFile(filepath.Join(l.Dir(), o.StdoutFile))
	require.NoError(t, err)
	assert.Equal(t, big, string(whole))
	assert.False(t, o.Truncated)
}

// The artifact files of one Log stop at MaxArtifactBytes, and the record
// says so; the client still gets everything.
func TestCaptureStopsAtTheDiskCap(t *testing.T) {
	l, err := Open(t.TempDir())
	require.NoError(t, err)
	l.disk = MaxArtifactBytes - 10
	c := l.Capture("id2")
	var client bytes.Buffer
	_, err = c.Stdout(&client).Write([]byte("0123456789abcdef"))
	require.NoError(t, err)
	o := c.Close()
	assert.Equal(t, "0123456789abcdef", client.String())
	assert.True(t, o.Truncated)
	whole, err := os.ReadFile(filepath.Join(l.Dir(), o.StdoutFile))
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(whole))
	assert.Equal(t, int64(16), o.StdoutBytes)
}

// A stream's file stops at MaxStreamFile: the client gets it all, the
// record its first 64 MiB, its end inline and its whole size.
func TestCaptureStopsEachStreamAtItsBound(t *testing.T) {
	l, err := Open(t.TempDir())
	require.NoError(t, err)
	c := l.Capture("id3")
	w := c.Stdout(io.Discard)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range MaxStreamFile>>20 + 3 {
		_, err := w.Write(chunk)
		require.NoError(t, err)
	}
	o := c.Close()
	assert.True(t, o.Truncated)
	assert.Equal(t, int64(MaxStreamFile+3<<20), o.StdoutBytes)
	st, err := os.Stat(filepath.Join(l.Dir(), o.StdoutFile))
	require.NoError(t, err)
	assert.Equal(t, int64(MaxStreamFile), st.Size())
	assert.Len(t, o.Stdout, MaxInline)
}

func TestReadFilters(t *testing.T) {
	l, err := Open(t.TempDir())
	require.NoError(t, err)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c"} {
		require.NoError(t, l.Write(&Record{ID: id, Kind: "exec", Start: t0, End: t0.Add(time.Duration(i) * time.Minute)}))
	}
	for _, c := range []struct {
		f    Filter
		want []string
	}{
		{Filter{}, []string{"a", "b", "c"}},
		{Filter{Since: t0.Add(time.Minute)}, []string{"b", "c"}},
		{Filter{Session: "b"}, []string{"b"}},
		{Filter{Since: t0.Add(2 * time.Minute), Session: "a"}, nil},
	} {
		recs, err := Read(l.Dir(), c.f)
		require.NoError(t, err)
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		assert.Equal(t, c.want, ids, "%+v", c.f)
		all, err := Read(l.Dir(), Filter{})
		require.NoError(t, err)
		assert.Equal(t, recs, c.f.Select(all), "Select keeps what Read keeps: %+v", c.f)
	}
}

func TestUsageOf(t *testing.T) {
	assert.Nil(t, UsageOf(nil))
	assert.Nil(t, UsageOf((*syscall.Rusage)(nil)))
	u := UsageOf(&syscall.Rusage{Utime: syscall.Timeval{Sec: 1, Usec: 500000}, Stime: syscall.Timeval{Usec: 250000}, Maxrss: 2048})
	assert.Equal(t, &Usage{UserCPUSec: 1.5, SystemCPUSec: 0.25, MaxRSSBytes: 2 << 20}, u)
}

// Every field a client chooses is bounded when it is written, so that no
// record is too long to be read back: an SSH login name may fill a whole
// packet (256 KiB), and JSON writes each '<' as six bytes. A record that
// could not be read would hide every record after it from `records`.
func TestAnyRecordWrittenReadsBack(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	require.NoError(t, err)
	huge := strings.Repeat("<", 256<<10)
	worst := strings.Repeat("<", MaxCommand)
	tails := strings.Repeat("<", MaxInline)
	require.NoError(t, l.Write(&Record{ID: "big", Kind: "subsystem", Login: huge, Subsystem: huge, Term: huge, Remote: huge,
		Ended: huge, Signal: huge, User: huge, Key: huge, Cast: huge, Command: worst, Argv: []string{worst},
		Output: &Output{Stdout: tails, Stderr: tails, StdoutFile: huge, StderrFile: huge}}))
	require.NoError(t, l.Write(&Record{ID: "after", Kind: "exec"}))
	recs, err := Read(dir, Filter{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "after", recs[1].ID)
	assert.LessOrEqual(t, len(recs[0].Login), maxField)
	assert.True(t, strings.HasPrefix(recs[0].Login, "<<<<"))
	assert.Equal(t, worst, recs[0].Command, "a command within MaxCommand is kept whole")
}

// Casts count against the records dir's disk cap with the outputs: a
// terminal session opened after the cap is reached records its header
// and the truncation mark, not what it printed.
func TestCastsCountAgainstTheDiskCap(t *testing.T) {
	l, err := Open(t.TempDir())
	require.NoError(t, err)
	l.disk = MaxArtifactBytes - 10
	c, name, err := l.NewCast("id3", 80, 24, "xterm", "", time.Now())
	require.NoError(t, err)
	_, err = c.Write([]byte(strings.Repeat("the agent printing forever\n", 100)))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	b, err := os.ReadFile(filepath.Join(l.Dir(), name))
	require.NoError(t, err)
	assert.NotContains(t, string(b), "printing forever")
	assert.Contains(t, string(b), "recording truncated")
}
