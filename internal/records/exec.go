package records

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// ExecStart is what is known of an exec when it starts.
type ExecStart struct {
	Via        string // "control", "ssh"
	Argv       []string
	User       string
	UID, GID   uint32
	PTY        bool
	Term       string
	Cols, Rows uint32
}

// Exec is the record of one exec while it runs: its cast with a terminal,
// its output without one, and the bytes each way; Finish writes it.
type Exec struct {
	log     *Log
	logger  *slog.Logger
	rec     Record
	cast    *Cast
	capture *Capture
	in, out atomic.Int64
}

// StartExec begins the record of an exec; a cast or capture that cannot be
// made is logged, and the exec is recorded without it.
func (l *Log) StartExec(s ExecStart, logger *slog.Logger) *Exec {
	now := time.Now()
	r := &Exec{log: l, logger: logger, rec: Record{
		ID: NewID(now), Kind: "exec", Via: s.Via, Argv: s.Argv,
		User: s.User, UID: s.UID, GID: s.GID, PTY: s.PTY, Start: now,
	}}
	r.rec.Command = strings.Join(s.Argv, " ")
	if len(r.rec.Command) > MaxCommand {
		r.rec.Command, r.rec.Truncated = r.rec.Command[:MaxCommand], true
		r.rec.Argv = nil
	}
	if s.PTY {
		r.rec.Term = s.Term
		c, name, err := l.NewCast(r.rec.ID, s.Cols, s.Rows, s.Term, r.rec.Command, now)
		if err != nil {
			logger.Warn("exec not recorded as a cast", "id", r.rec.ID, "err", err)
		}
		r.cast, r.rec.Cast = c, name
	} else {
		r.capture = l.Capture(r.rec.ID)
	}
	return r
}

// Stdout is w, counted and recorded.
func (r *Exec) Stdout(w io.Writer) io.Writer {
	w = CountingWriter{W: w, N: &r.out}
	if r.cast != nil {
		return io.MultiWriter(w, r.cast)
	}
	return r.capture.Stdout(w)
}

// Stderr is w, counted and recorded.
func (r *Exec) Stderr(w io.Writer) io.Writer {
	return r.capture.Stderr(CountingWriter{W: w, N: &r.out})
}

// Input counts n bytes the client sent.
func (r *Exec) Input(n int) { r.in.Add(int64(n)) }

// Resize follows the terminal's size in the cast.
func (r *Exec) Resize(cols, rows uint32) {
	if r.cast != nil {
		r.cast.Resize(cols, rows)
	}
}

// Finish writes the record: the exit code, the signal's name, wait4's
// rusage (a *syscall.Rusage, or nil) and why the exec ended other than by
// itself ("timeout", "disconnect", a setup failure), or "".
func (r *Exec) Finish(code int, signal string, rusage any, ended string) {
	r.rec.End = time.Now()
	r.rec.Exit, r.rec.Signal, r.rec.Ended = code, signal, ended
	r.rec.BytesIn, r.rec.BytesOut = r.in.Load(), r.out.Load()
	r.rec.Usage = UsageOf(rusage)
	r.rec.Output = r.capture.Close()
	if r.cast != nil {
		if err := r.cast.Close(); err != nil {
			r.logger.Warn("exec recording incomplete", "id", r.rec.ID, "err", err)
		}
	}
	if err := r.log.Write(&r.rec); err != nil {
		r.logger.Warn("exec record lost", "id", r.rec.ID, "err", err)
	}
}

// CountingWriter counts the bytes written through it into N.
type CountingWriter struct {
	W io.Writer
	N *atomic.Int64
}

// Write counts what W took.
func (c CountingWriter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N.Add(int64(n))
	return n, err
}

// MarkAgentSessions puts each agent mark's outcome (a record of kind
// "agent", which agent-done writes) on the sessions of recs it names by
// client address; all is every record, whichever recs a filter kept.
func MarkAgentSessions(recs, all []Record) {
	marks := map[string]*Record{}
	for i := range all {
		if all[i].Kind == "agent" && all[i].Remote != "" {
			marks[all[i].Remote] = &all[i]
		}
	}
	for i := range recs {
		if m, ok := marks[recs[i].Remote]; ok && recs[i].Kind != "agent" && recs[i].Remote != "" {
			recs[i].Agent = m.Agent
		}
	}
}

// ParseSince reads a --since: an RFC 3339 time, or a duration back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("bad --since %q: write an RFC 3339 time (2026-12-01T10:00:00Z) or a duration back from now (10m)", s)
}

// CountingReader counts the bytes read through it into N.
type CountingReader struct {
	R io.Reader
	N *atomic.Int64
}

// Read counts what R gave.
func (c CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N.Add(int64(n))
	return n, err
}
