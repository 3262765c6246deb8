package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

// recordExec begins the record of one control-socket exec, kept as an SSH
// exec's is.
func (d *Daemon) recordExec(req control.Request, user idmap.User) *records.Exec {
	return d.recs.StartExec(records.ExecStart{Via: "control", Argv: req.Argv, User: userName(user), UID: user.UID, GID: user.GID,
		PTY: req.TTY, Term: req.Term, Cols: uint32(req.Cols), Rows: uint32(req.Rows)}, d.log)
}

func userName(u idmap.User) string {
	if u.Name != "" {
		return u.Name
	}
	return fmt.Sprint(u.UID)
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
		t, err := records.ParseSince(req.Since, time.Now())
		if err != nil {
			return nil, &control.Failure{Code: 2, Message: err.Error()}
		}
		f.Since = t
	}
	f.Session = req.Session
	// Read once: the agent marks are among all the records, whichever
	// the filter keeps.
	all, err := records.Read(d.harnessPath("records"), records.Filter{})
	records.MarkAgentSessions(all, all)
	recs := f.Select(all)
	if recs == nil {
		recs = []records.Record{}
	}
	return recs, err
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
