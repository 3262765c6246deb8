// Package records keeps the record of every session the daemon ran — SSH
// sessions, control-socket execs, copies — as JSON Lines in the harness
// dir, with each command's resource usage and, for a command without a
// terminal, its output: the head inline, the whole as an artifact file up
// to a disk cap. The harness dir is absent from the sandbox's view, so an
// agent can neither read what was recorded nor rewrite it.
package records

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/pkg/grade"
)

// Record is one session as written to DIR/sessions.jsonl when it ends.
type Record struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`          // exec, shell, subsystem, harness, cp
	Via       string    `json:"via,omitempty"` // ssh, or control (the control socket); "" in records written before it was kept
	Command   string    `json:"command,omitempty"`
	Argv      []string  `json:"argv,omitempty"` // a control-socket exec's argv, as given
	Truncated bool      `json:"command_truncated,omitempty"`
	Subsystem string    `json:"subsystem,omitempty"`
	User      string    `json:"user"` // the identity the session ran as
	UID       uint32    `json:"uid"`
	GID       uint32    `json:"gid"`
	Login     string    `json:"login,omitempty"` // the SSH login name (not used for identity)
	Key       string    `json:"key,omitempty"`   // SHA256 fingerprint of the client's SSH key
	Remote    string    `json:"remote,omitempty"`
	PTY       bool      `json:"pty"`
	Term      string    `json:"term,omitempty"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Exit      int       `json:"exit"`
	Signal    string    `json:"signal,omitempty"`
	// Why the session ended other than by itself: "timeout", "disconnect",
	// or the setup failure reported to the client.
	Ended    string  `json:"ended,omitempty"`
	BytesIn  int64   `json:"bytes_in"`
	BytesOut int64   `json:"bytes_out"`
	Cast     string  `json:"cast,omitempty"` // asciicast v2 file of a pty session, relative to DIR
	Usage    *Usage  `json:"usage,omitempty"`
	Output   *Output `json:"output,omitempty"`
	// Agent is how the agent's run ended, as the harness marked it
	// (agent-done): on the mark itself (kind "agent") and on the session
	// it names.
	Agent *grade.Agent `json:"agent,omitempty"`
}

// Usage is what the command's leader used, with the descendants it waited
// for, as wait4 reports it; processes it left running are not counted.
type Usage struct {
	UserCPUSec   float64 `json:"user_cpu_sec"`
	SystemCPUSec float64 `json:"system_cpu_sec"`
	MaxRSSBytes  int64   `json:"max_rss_bytes"`
}

// UsageOf reads a wait4 rusage (os.ProcessState.SysUsage); nil gives nil.
func UsageOf(sys any) *Usage {
	ru, ok := sys.(*syscall.Rusage)
	if !ok || ru == nil {
		return nil
	}
	return &Usage{
		UserCPUSec:   float64(ru.Utime.Nano()) / 1e9,
		SystemCPUSec: float64(ru.Stime.Nano()) / 1e9,
		MaxRSSBytes:  ru.Maxrss << 10, // Linux reports KiB
	}
}

// MaxCommand bounds a recorded command line: commands can be a megabyte.
const MaxCommand = 64 << 10

// NewID is a record's id: sortable by start, unique.
func NewID(t time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return t.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

const file = "sessions.jsonl"

// Log appends records and makes their files under one directory. Appends
// from several Logs on one directory never interleave: each record is one
// write(2) to a file opened O_APPEND.
type Log struct {
	dir string
	mu  sync.Mutex
	// disk is the bytes of output artifacts and casts written so far,
	// against MaxArtifactBytes.
	disk int64
}

// Open makes dir (0700) and a Log on it; an empty dir gives a nil Log,
// on which every method does nothing. One process has one Log per
// directory, whichever door opens it, so that the disk cap holds for all.
func Open(dir string) (*Log, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create records dir %s: %w", dir, err)
	}
	l, _ := logs.LoadOrStore(filepath.Clean(dir), &Log{dir: dir})
	return l.(*Log), nil
}

var logs sync.Map // clean dir → *Log

// reserve takes n bytes of the disk cap for a whole write, or none and
// false when they no longer fit.
func (l *Log) reserve(n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.disk+n > MaxArtifactBytes {
		return false
	}
	l.disk += n
	return true
}

// Dir is where the Log writes.
func (l *Log) Dir() string { return l.dir }

// maxField bounds each other free-form field of a record as it is written
// (a login name may fill an SSH packet), and maxLine the line Read takes:
// with the commands at MaxCommand and the tails at MaxInline, even JSON's
// six bytes for each '<' keep a record within it, so that no record hides
// the ones after it.
const (
	maxField = 4 << 10
	maxLine  = 4 << 20
)

// bound cuts the free-form fields of r to maxField bytes.
func bound(r *Record) {
	for _, s := range []*string{&r.Login, &r.Subsystem, &r.Term, &r.Remote, &r.Ended, &r.Signal, &r.User, &r.Key, &r.Cast} {
		if len(*s) > maxField {
			*s = (*s)[:maxField]
		}
	}
	if len(r.Command) > MaxCommand {
		r.Command, r.Truncated = r.Command[:MaxCommand], true
	}
	if n := len(r.Argv); n > 0 && len(strings.Join(r.Argv, " ")) > MaxCommand {
		r.Argv = nil
	}
	if o := r.Output; o != nil {
		for _, s := range []*string{&o.Stdout, &o.Stderr, &o.StdoutFile, &o.StderrFile} {
			if len(*s) > MaxInline {
				*s = (*s)[len(*s)-MaxInline:]
			}
		}
	}
}

// Write appends r, its fields bounded first.
func (l *Log) Write(r *Record) error {
	if l == nil {
		return nil
	}
	bound(r)
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode session record %s: %w", r.ID, err)
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(l.dir, file), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open session records: %w", err)
	}
	_, werr := f.Write(line)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("append session record %s: %w", r.ID, werr)
	}
	return cerr
}

// Filter selects records; the zero Filter selects all.
type Filter struct {
	Since   time.Time // ended at or after
	Session string    // this record id only
}

func (f Filter) match(r *Record) bool {
	return (f.Since.IsZero() || !r.End.Before(f.Since)) && (f.Session == "" || r.ID == f.Session)
}

// Select is the records of all that f selects, in their order.
func (f Filter) Select(all []Record) []Record {
	var out []Record
	for i := range all {
		if f.match(&all[i]) {
			out = append(out, all[i])
		}
	}
	return out
}

// Read reads the records in dir that f selects, oldest first.
func Read(dir string, f Filter) ([]Record, error) {
	fh, err := os.Open(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read session records: %w", err)
	}
	defer fh.Close()
	var out []Record
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("%s line %d: %w", fh.Name(), n, err)
		}
		if f.match(&r) {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}
