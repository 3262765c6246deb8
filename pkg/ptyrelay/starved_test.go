package ptyrelay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// slowWriter stalls before each write, as a loaded machine or a slow client
// does: the tail deadline passes while output still sits in the pipe.
type slowWriter struct {
	bytes.Buffer
	delay time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	return w.Buffer.Write(p)
}

// Nothing the command printed before it exited is lost, however late the
// relay gets to it (docs/failures.md#output-streams-and-survives-a-timeout).
func TestOutputWrittenBeforeExitSurvivesAStarvedRelay(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	u, err := idmap.Lookup("/", "0")
	require.NoError(t, err)
	out := &slowWriter{delay: 30 * time.Millisecond}
	// 256 KiB: more than a pipe holds, so the command exits with the last
	// of it still in the pipe while the relay is busy writing; each relay
	// write takes longer than the whole quiet period.
	sess, err := Start(Config{
		Target: sb.Target,
		Spec:   join.Spec{User: u, Env: []string{"PATH=" + childproc.DefaultPath}, Argv: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 256 ]; do head -c 1023 /dev/zero | tr '\\0' x; echo; i=$((i+1)); done"}},
		Stdout: out, DrainQuiet: 5 * time.Millisecond, DrainMax: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	e := sess.Wait()
	require.Equal(t, 0, e.Code)
	assert.Equal(t, 256, strings.Count(out.String(), "\n"))
	assert.Equal(t, 256*1024, out.Len())
}
