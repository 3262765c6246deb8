package sshd

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/records"
)

// Record is one session as written to RecordsDir/sessions.jsonl when it
// ends (internal/records keeps them, for every door).
type Record = records.Record

const maxRecordedCommand = records.MaxCommand

// ReadRecords reads every session record in dir, oldest first.
func ReadRecords(dir string) ([]Record, error) { return records.Read(dir, records.Filter{}) }

// recorder is the SSH door's records log.
type recorder struct{ log *records.Log }

func newRecorder(dir string) (*recorder, error) {
	l, err := records.Open(dir)
	if l == nil || err != nil {
		return nil, err
	}
	return &recorder{log: l}, nil
}

func newID(t time.Time) string { return records.NewID(t) }

// write appends r to the records file.
func (rc *recorder) write(r *Record) error {
	if rc == nil {
		return nil
	}
	return rc.log.Write(r)
}

// capture records a non-pty exec's output.
func (rc *recorder) capture(id string) *records.Capture {
	if rc == nil {
		return nil
	}
	return rc.log.Capture(id)
}

// cast is a pty session's asciicast.
type cast struct{ c *records.Cast }

func (rc *recorder) newCast(id string, cols, rows uint32, term, command string, start time.Time) (*cast, string, error) {
	if rc == nil {
		return nil, "", nil
	}
	c, name, err := rc.log.NewCast(id, cols, rows, term, command, start)
	if err != nil {
		return nil, "", err
	}
	return &cast{c}, name, nil
}

func (c *cast) output(p []byte)          { c.c.Output(p) }
func (c *cast) resize(cols, rows uint32) { c.c.Resize(cols, rows) }
func (c *cast) close() error             { return c.c.Close() }

// countingWriter counts the bytes the client was sent and tees terminal
// output into the cast.
type countingWriter struct {
	w    io.Writer
	n    *atomic.Int64
	cast *cast
}

func (cw countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	if cw.cast != nil && n > 0 {
		cw.cast.output(p[:n])
	}
	return n, err
}
