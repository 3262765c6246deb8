package records

import (
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/sandboxd/sandboxd/internal/tail"
)

// The bounds of recorded output (README, "Records"): the end of each
// stream inline in the record, and the stream in a file beside the records
// up to MaxStreamFile, until all such files of one daemon reach
// MaxArtifactBytes, so that an agent printing forever cannot fill the
// harness dir's disk. The per-stream bound also keeps a bulk transfer
// (a 1 GiB cat over SSH) from being written to disk a second time: the
// client gets all of it, the record its first 64 MiB and its end.
const (
	MaxInline        = 16 << 10
	MaxStreamFile    = 64 << 20
	MaxArtifactBytes = 1 << 30
)

// Output is what a command without a terminal printed.
type Output struct {
	Stdout      string `json:"stdout_tail"` // the last MaxInline bytes
	Stderr      string `json:"stderr_tail"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	StdoutFile  string `json:"stdout_file,omitempty"` // the whole stream, relative to the records dir
	StderrFile  string `json:"stderr_file,omitempty"`
	// Truncated says that a file stops short of its stream: the stream
	// passed MaxStreamFile, the disk cap was reached, or the disk was full.
	Truncated bool `json:"truncated,omitempty"`
}

// Capture records one command's output as it is relayed.
type Capture struct {
	out, err *stream
}

// Capture starts the output record of session id; on a nil Log it records
// nothing.
func (l *Log) Capture(id string) *Capture {
	if l == nil {
		return nil
	}
	return &Capture{out: &stream{l: l, name: id + ".stdout", tail: tail.New(MaxInline)}, err: &stream{l: l, name: id + ".stderr", tail: tail.New(MaxInline)}}
}

// Stdout is w, with what is written to it recorded as stdout.
func (c *Capture) Stdout(w io.Writer) io.Writer {
	if c == nil {
		return w
	}
	return tee{w, c.out}
}

// Stderr is w, with what is written to it recorded as stderr.
func (c *Capture) Stderr(w io.Writer) io.Writer {
	if c == nil {
		return w
	}
	return tee{w, c.err}
}

// Close ends the capture and says what was kept.
func (c *Capture) Close() *Output {
	if c == nil {
		return nil
	}
	o := &Output{}
	o.Stdout, o.StdoutBytes, o.StdoutFile = c.out.close()
	o.Stderr, o.StderrBytes, o.StderrFile = c.err.close()
	o.Truncated = c.out.cut || c.err.cut
	return o
}

type tee struct {
	w io.Writer
	s *stream
}

// Write gives p to the client first; what reached it is recorded, and
// recording never fails the write.
func (t tee) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if n > 0 {
		t.s.write(p[:n])
	}
	return n, err
}

type stream struct {
	l    *Log
	name string
	tail *tail.Buffer

	mu  sync.Mutex
	f   *os.File
	n   int64
	cut bool
}

func (s *stream) write(p []byte) {
	s.tail.Write(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += int64(len(p))
	if s.cut {
		return
	}
	s.l.mu.Lock()
	room := min(MaxArtifactBytes-s.l.disk, MaxStreamFile-(s.n-int64(len(p))))
	if room < int64(len(p)) {
		p, s.cut = p[:max(room, 0)], true
	}
	s.l.disk += int64(len(p))
	s.l.mu.Unlock()
	if len(p) == 0 {
		return
	}
	if s.f == nil {
		f, err := os.OpenFile(filepath.Join(s.l.dir, s.name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			s.cut = true
			return
		}
		s.f = f
	}
	if _, err := s.f.Write(p); err != nil {
		s.cut = true
	}
}

func (s *stream) close() (string, int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := ""
	if s.f != nil {
		if err := s.f.Close(); err != nil {
			s.cut = true
		}
		name = s.name
	}
	return s.tail.String(), s.n, name
}
