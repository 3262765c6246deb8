package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

// execRecord is the record of one control-socket exec, kept as an SSH
// exec's is: its cast with a terminal, its output without one.
type execRecord struct {
	d       *Daemon
	rec     records.Record
	cast    *records.Cast
	capture *records.Capture
	in, out atomic.Int64
}

func (d *Daemon) recordExec(req control.Request, user idmap.User) *execRecord {
	now := time.Now()
	r := &execRecord{d: d, rec: records.Record{
		ID: records.NewID(now), Kind: "exec", Via: "control", Argv: req.Argv,
		User: userName(user), UID: user.UID, GID: user.GID, PTY: req.TTY, Start: now,
	}}
	r.rec.Command = strings.Join(req.Argv, " ")
	if len(r.rec.Command) > records.MaxCommand {
		r.rec.Command, r.rec.Truncated = r.rec.Command[:records.MaxCommand], true
		r.rec.Argv = nil
	}
	if req.TTY {
		r.rec.Term = req.Term
		c, name, err := d.recs.NewCast(r.rec.ID, uint32(req.Cols), uint32(req.Rows), req.Term, r.rec.Command, now)
		if err != nil {
			d.log.Warn("exec not recorded as a cast", "id", r.rec.ID, "err", err)
		}
		r.cast, r.rec.Cast = c, name
	} else {
		r.capture = d.recs.Capture(r.rec.ID)
	}
	return r
}

func userName(u idmap.User) string {
	if u.Name != "" {
		return u.Name
	}
	return fmt.Sprint(u.UID)
}

// stdout and stderr are the client's streams, counted and recorded.
func (r *execRecord) stdout(w io.Writer) io.Writer {
	w = counting{w, &r.out}
	if r.cast != nil {
		return io.MultiWriter(w, r.cast)
	}
	return r.capture.Stdout(w)
}

func (r *execRecord) stderr(w io.Writer) io.Writer {
	return r.capture.Stderr(counting{w, &r.out})
}

func (r *execRecord) input(n int) { r.in.Add(int64(n)) }

func (r *execRecord) resize(cols, rows int) {
	if r.cast != nil {
		r.cast.Resize(uint32(cols), uint32(rows))
	}
}

// finish writes the record; ended is why the exec ended other than by
// itself ("timeout", "disconnect"), or "".
func (r *execRecord) finish(e ptyrelay.Exit, code int, ended string) {
	r.rec.End = time.Now()
	r.rec.Exit, r.rec.Signal, r.rec.Ended = code, e.SignalName(), ended
	r.rec.BytesIn, r.rec.BytesOut = r.in.Load(), r.out.Load()
	r.rec.Usage = records.UsageOf(e.Rusage)
	r.rec.Output = r.capture.Close()
	if r.cast != nil {
		if err := r.cast.Close(); err != nil {
			r.d.log.Warn("exec recording incomplete", "id", r.rec.ID, "err", err)
		}
	}
	if err := r.d.recs.Write(&r.rec); err != nil {
		r.d.log.Warn("exec record lost", "id", r.rec.ID, "err", err)
	}
}

type counting struct {
	w io.Writer
	n *atomic.Int64
}

func (c counting) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// Records are the recorded sessions, oldest first.
type Records []records.Record

// Print writes the records as JSON Lines, one record a line.
func (r Records) Print(stdout, _ io.Writer) int {
	for i := range r {
		b, _ := json.Marshal(&r[i])
		fmt.Fprintf(stdout, "%s\n", b)
	}
	return 0
}

func (d *Daemon) records(req control.Request) (Records, error) {
	var f records.Filter
	if req.Since != "" {
		t, err := parseSince(req.Since, time.Now())
		if err != nil {
			return nil, &control.Failure{Code: 2, Message: err.Error()}
		}
		f.Since = t
	}
	f.Session = req.Session
	recs, err := records.Read(d.harnessPath("records"), f)
	if recs == nil {
		recs = []records.Record{}
	}
	d.markAgentSessions(recs)
	return recs, err
}

// parseSince reads --since: an RFC 3339 time, or a duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("bad --since %q: write an RFC 3339 time (2026-12-01T10:00:00Z) or a duration back from now (10m)", s)
}

// recordCopy writes the record of one cp.
func (d *Daemon) recordCopy(req control.Request, owner idmap.User, start time.Time, out tarcopy.Outcome) {
	dir := "in"
	if req.Copy.Out {
		dir = "out"
	}
	rec := records.Record{
		ID: records.NewID(start), Kind: "cp", Via: "control", Command: "cp " + dir + " " + req.Copy.Path,
		User: userName(owner), UID: owner.UID, GID: owner.GID, Start: start, End: time.Now(),
		Exit: out.Exit.Code, Signal: out.Exit.Signal, Usage: records.UsageOf(out.State.SysUsage()),
	}
	if req.Copy.Out {
		rec.BytesOut = out.Bytes
	} else {
		rec.BytesIn = out.Bytes
	}
	if err := d.recs.Write(&rec); err != nil {
		d.log.Warn("cp record lost", "id", rec.ID, "err", err)
	}
}
