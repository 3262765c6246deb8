package ptyrelay

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// oddPieces are write sizes that fall on no page, pipe buffer or packet
// boundary, from single bytes to more than the relay's buffer.
var oddPieces = []int{1, 3, 7, 4093, 4099, 32767, 32769, 65537, 100003}

// pattern is n bytes that repeat every 251 (a prime): a lost, repeated or
// reordered piece shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// recorder keeps what the relay wrote and how large each write was.
type recorder struct {
	bytes.Buffer
	writes []int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, len(p))
	return r.Buffer.Write(p)
}

// relayOut alone, on a pipe: every byte arrives once and in order, whatever
// the sizes the writer chose; no sandbox needed.
func TestRelayOutKeepsOddSizedWritesInOrder(t *testing.T) {
	want := pattern(8 << 20)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	written := make(chan error, 1)
	go func() {
		defer w.Close()
		rest := want
		for i := 0; len(rest) > 0; i++ {
			k := min(oddPieces[i%len(oddPieces)], len(rest))
			if _, err := w.Write(rest[:k]); err != nil {
				written <- err
				return
			}
			rest = rest[k:]
		}
		written <- nil
	}()
	s := &Session{cfg: Config{DrainQuiet: DefaultDrainQuiet, DrainMax: DefaultDrainMax}}
	var out recorder
	s.outWG.Add(1)
	var eof bool
	s.relayOut(r, &out, &eof)
	require.NoError(t, <-written)
	assert.True(t, eof, "the relay read the pipe to its end")
	require.NoError(t, s.OutputError())
	assert.True(t, bytes.Equal(want, out.Bytes()), "relayed %d bytes, want %d, first difference at %d",
		out.Len(), len(want), firstDifference(want, out.Bytes()))
	for _, n := range out.writes {
		require.LessOrEqual(t, n, 64<<10, "the relay writes from its fixed buffer")
	}
	t.Logf("%d bytes in %d writes", out.Len(), len(out.writes))
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Through a real session, with pipes and with a terminal: a command whose
// writes come in odd sizes arrives whole and in order.
func TestSessionKeepsOddSizedWritesInOrder(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	u, err := idmap.Lookup("/", "0")
	require.NoError(t, err)
	// Each piece is `seq` output cut by dd into blocks of one odd size.
	var script []string
	var want strings.Builder
	from := 1
	for _, bs := range oddPieces {
		to := from + min(400*bs, 60000)
		script = append(script, fmt.Sprintf("seq %d %d | dd bs=%d iflag=fullblock status=none", from, to, bs))
		for i := from; i <= to; i++ {
			want.WriteString(strconv.Itoa(i) + "\n")
		}
		from = to + 1
	}
	for _, withPTY := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", withPTY), func(t *testing.T) {
			var out recorder
			cfg := Config{
				Target: sb.Target,
				Spec:   join.Spec{User: u, Env: []string{"PATH=" + childproc.DefaultPath}, Argv: []string{"/bin/sh", "-c", strings.Join(script, "; ")}},
				Stdout: &out,
			}
			expected := want.String()
			if withPTY {
				cfg.PTY = &PTY{Term: "dumb"}
				expected = strings.ReplaceAll(expected, "\n", "\r\n") // the terminal's onlcr
			}
			s, err := Start(cfg)
			require.NoError(t, err)
			e := s.Wait()
			require.Equal(t, 0, e.Code, "the command's last output: %q", out.Bytes()[max(0, out.Len()-200):])
			assert.True(t, out.String() == expected, "relayed %d bytes, want %d, first difference at %d",
				out.Len(), len(expected), firstDifference([]byte(expected), out.Bytes()))
		})
	}
}
