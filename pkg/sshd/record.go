package sshd

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Record is one session as written to RecordsDir/sessions.jsonl when it
// ends. The records live in the harness dir, which the sandbox cannot see:
// an agent can neither read what was recorded nor rewrite it.
type Record struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"` // exec, shell, subsystem, harness
	Command   string    `json:"command,omitempty"`
	Truncated bool      `json:"command_truncated,omitempty"`
	Subsystem string    `json:"subsystem,omitempty"`
	User      string    `json:"user"` // the identity the session ran as
	UID       uint32    `json:"uid"`
	GID       uint32    `json:"gid"`
	Login     string    `json:"login"` // the SSH login name (not used for identity)
	Key       string    `json:"key"`   // SHA256 fingerprint of the client's key
	Remote    string    `json:"remote"`
	PTY       bool      `json:"pty"`
	Term      string    `json:"term,omitempty"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Exit      int       `json:"exit"`
	Signal    string    `json:"signal,omitempty"`
	// Why the session ended other than by itself: "timeout", "disconnect",
	// or the setup failure reported to the client.
	Ended    string `json:"ended,omitempty"`
	BytesIn  int64  `json:"bytes_in"`
	BytesOut int64  `json:"bytes_out"`
	Cast     string `json:"cast,omitempty"` // asciicast v2 file of a pty session, relative to RecordsDir
}

// Limits on recording: commands can be a megabyte, a cast can be a whole
// day of output; neither may fill the harness dir's disk.
const (
	maxRecordedCommand = 64 << 10
	maxCastBytes       = 64 << 20
)

// ReadRecords reads every session record in dir, oldest first, for
// `sandboxd records`.
func ReadRecords(dir string) ([]Record, error) {
	f, err := os.Open(filepath.Join(dir, recordsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read session records: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("%s line %d: %w", f.Name(), n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

const recordsFile = "sessions.jsonl"

// recorder appends records and makes cast files under one directory.
type recorder struct {
	dir string
	mu  sync.Mutex // one record per write, lines never interleave
}

func newRecorder(dir string) (*recorder, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create records dir %s: %w", dir, err)
	}
	return &recorder{dir: dir}, nil
}

func newID(t time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return t.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// write appends r to the records file.
func (rc *recorder) write(r *Record) error {
	if rc == nil {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode session record %s: %w", r.ID, err)
	}
	line = append(line, '\n')
	rc.mu.Lock()
	defer rc.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(rc.dir, recordsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
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

// cast writes an asciicast v2 file: a header line, then one JSON array per
// event [seconds, "o"|"r", data]. Input is not recorded: it holds what the
// user typed at password prompts.
type cast struct {
	mu      sync.Mutex
	f       *os.File
	w       *bufio.Writer
	start   time.Time
	written int64
	partial []byte // an incomplete UTF-8 sequence held for the next chunk
	full    bool
	err     error
}

func (rc *recorder) newCast(id string, cols, rows uint32, term, command string, start time.Time) (*cast, string, error) {
	if rc == nil {
		return nil, "", nil
	}
	name := id + ".cast"
	f, err := os.OpenFile(filepath.Join(rc.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("create cast %s: %w", name, err)
	}
	// asciinema refuses a zero-sized terminal; 0×0 is what `ssh -tt`
	// without a terminal of its own asks for.
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	hdr := map[string]any{
		"version": 2, "width": cols, "height": rows, "timestamp": start.Unix(),
		"env": map[string]string{"TERM": term},
	}
	if command != "" {
		hdr["command"] = command
	}
	c := &cast{f: f, w: bufio.NewWriterSize(f, 32<<10), start: start}
	line, _ := json.Marshal(hdr)
	c.w.Write(append(line, '\n'))
	return c, name, nil
}

func (c *cast) event(kind string, data string) {
	if c.full || c.err != nil {
		return
	}
	line, _ := json.Marshal([]any{jsonSeconds(time.Since(c.start)), kind, data})
	line = append(line, '\n')
	if c.written+int64(len(line)) > maxCastBytes {
		c.full = true
		line, _ = json.Marshal([]any{jsonSeconds(time.Since(c.start)), "o", "\r\n[sandboxd: recording truncated at 64 MiB]\r\n"})
		line = append(line, '\n')
	}
	n, err := c.w.Write(line)
	c.written += int64(n)
	if err == nil {
		err = c.w.Flush()
	}
	c.err = err
}

// jsonSeconds keeps casts small: microseconds are plenty for playback.
type jsonSeconds time.Duration

func (d jsonSeconds) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.6f", time.Duration(d).Seconds())), nil
}

// output records a chunk of terminal output, keeping UTF-8 sequences whole
// across chunks (JSON strings cannot hold half a character).
func (c *cast) output(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.partial, p...)
	cut := len(buf)
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	c.partial = append([]byte(nil), buf[cut:]...)
	if cut > 0 {
		c.event("o", string(buf[:cut]))
	}
}

func (c *cast) resize(cols, rows uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.event("r", fmt.Sprintf("%dx%d", cols, rows))
}

func (c *cast) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.partial) > 0 {
		c.event("o", string(c.partial))
	}
	ferr := c.w.Flush()
	cerr := c.f.Close()
	return errors.Join(c.err, ferr, cerr)
}

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

// countingReader counts the bytes the client sent.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (cr countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	cr.n.Add(int64(n))
	return n, err
}
