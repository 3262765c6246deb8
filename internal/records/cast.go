package records

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxCastBytes bounds a cast: one can be a whole day of output.
const MaxCastBytes = 64 << 20

// Cast writes an asciicast v2 file: a header line, then one JSON array per
// event [seconds, "o"|"r", data]. Input is not recorded: it holds what the
// user typed at password prompts.
type Cast struct {
	l       *Log // whose disk cap the cast counts against
	mu      sync.Mutex
	f       *os.File
	w       *bufio.Writer
	start   time.Time
	written int64
	partial []byte // an incomplete UTF-8 sequence held for the next chunk
	full    bool
	err     error
}

// NewCast creates the cast of session id, and returns it with its file's
// name relative to the records dir; a nil Log gives a nil Cast.
func (l *Log) NewCast(id string, cols, rows uint32, term, command string, start time.Time) (*Cast, string, error) {
	if l == nil {
		return nil, "", nil
	}
	name := id + ".cast"
	f, err := os.OpenFile(filepath.Join(l.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
	c := &Cast{l: l, f: f, w: bufio.NewWriterSize(f, 32<<10), start: start}
	line, _ := json.Marshal(hdr)
	c.w.Write(append(line, '\n'))
	return c, name, nil
}

func (c *Cast) event(kind string, data string) {
	if c.full || c.err != nil {
		return
	}
	line, _ := json.Marshal([]any{jsonSeconds(time.Since(c.start)), kind, data})
	line = append(line, '\n')
	// Each cast stops at MaxCastBytes, and all of them with the outputs at
	// the Log's disk cap: an agent opening terminals one after another
	// must not fill the harness dir's disk either.
	if c.written+int64(len(line)) > MaxCastBytes || !c.l.reserve(int64(len(line))) {
		c.full = true
		line, _ = json.Marshal([]any{jsonSeconds(time.Since(c.start)), "o", "\r\n[sandboxd: recording truncated at its bound]\r\n"})
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

// Output records a chunk of terminal output, keeping UTF-8 sequences whole
// across chunks (JSON strings cannot hold half a character).
func (c *Cast) Output(p []byte) {
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

// Write is Output, for a tee.
func (c *Cast) Write(p []byte) (int, error) {
	c.Output(p)
	return len(p), nil
}

// Resize records the terminal's new size.
func (c *Cast) Resize(cols, rows uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.event("r", fmt.Sprintf("%dx%d", cols, rows))
}

// Close flushes the cast and reports the first error it met.
func (c *Cast) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.partial) > 0 {
		c.event("o", string(c.partial))
	}
	ferr := c.w.Flush()
	cerr := c.f.Close()
	return errors.Join(c.err, ferr, cerr)
}
