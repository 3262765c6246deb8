// Package control is the protocol of the daemon's control socket and its
// client: `sandboxd exec`, `status`, `grade`, `stop`, `keys` and `records`
// talk to a running `serve` through it.
//
// A connection carries one request. The client sends a Request as a JSON
// frame; the daemon answers with frames: a single JSON document for the
// simple operations, or the streams of an exec (stdout, stderr) ended by an
// Exit frame. The client may send stdin, stdin EOF, window sizes and signals
// while an exec runs.
package control

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"github.com/sandboxd/sandboxd/pkg/grade"
)

// Frame kinds.
const (
	KindJSON   byte = 'j' // a request, or a one-document reply
	KindStdin  byte = '0'
	KindStdout byte = '1'
	KindStderr byte = '2'
	KindEOF    byte = 'e' // stdin is closed
	KindResize byte = 'w' // payload: Resize JSON
	KindSignal byte = 's' // payload: signal name
	KindExit   byte = 'x' // payload: Exit JSON; the last frame of an exec
	KindError  byte = '!' // payload: Failure JSON; the request failed
)

// MaxFrame bounds a frame's payload so that a bad peer cannot make either side
// allocate without limit.
const MaxFrame = 1 << 20

// Socket is the control socket's path inside a harness dir.
func Socket(harnessDir string) string { return filepath.Join(harnessDir, "run", "control.sock") }

// Request is what a client asks.
type Request struct {
	Op string `json:"op"` // exec, cp, status, grade, stop, keys, records

	// exec
	Argv    []string `json:"argv,omitempty"`
	User    string   `json:"user,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Env     []string `json:"env,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Stdin   bool     `json:"stdin,omitempty"`
	Term    string   `json:"term,omitempty"`
	Cols    int      `json:"cols,omitempty"`
	Rows    int      `json:"rows,omitempty"`
	Timeout string   `json:"timeout,omitempty"` // a Go duration; "" is none

	// grade
	GradeTimeout string `json:"grade_timeout,omitempty"`

	// keys --authorize: authorized_keys lines added to the agent keys
	Authorize string `json:"authorize,omitempty"`

	// records
	Since   string `json:"since,omitempty"`   // an RFC 3339 time, or a duration back from now
	Session string `json:"session,omitempty"` // a record's id

	// cp (User names the owner of what is copied in)
	Copy *Copy `json:"copy,omitempty"`

	// agent-done: how the agent's run ended, and the client address of
	// its session, as the session's record names it
	Agent  *grade.Agent `json:"agent,omitempty"`
	Remote string       `json:"remote,omitempty"`
}

// Copy is the sandbox's side of a `sandboxd cp`; the archive streams as
// stdin frames (into the sandbox) or stdout frames (out of it).
type Copy struct {
	Out     bool   `json:"out,omitempty"`     // sandbox to substrate
	Path    string `json:"path"`              // inside the sandbox's view
	Raw     bool   `json:"raw,omitempty"`     // copy-in of any archive (cp's `-`), into the directory Path
	Archive bool   `json:"archive,omitempty"` // keep the archive's ids (cp -a)
}

// Resize is a terminal's new size.
type Resize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Exit ends an exec.
type Exit struct {
	Code     int    `json:"code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// Failure is a request the daemon could not carry out, with what to do.
type Failure struct {
	Code    int    `json:"code"` // the exit code the CLI should use (125 unless the command's own)
	Message string `json:"message"`
}

func (f *Failure) Error() string { return f.Message }

// Conn frames a stream. Writes are serialized; reads belong to one goroutine.
type Conn struct {
	rw  io.ReadWriter
	wmu sync.Mutex
}

// NewConn frames rw.
func NewConn(rw io.ReadWriter) *Conn { return &Conn{rw: rw} }

// Write sends one frame.
func (c *Conn) Write(kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("control frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.rw.Write(hdr[:]); err != nil {
		return err
	}
	_, err := c.rw.Write(payload)
	return err
}

// WriteJSON sends v as one frame of the given kind.
func (c *Conn) WriteJSON(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Write(kind, b)
}

// Read receives one frame.
func (c *Conn) Read() (kind byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.rw, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("control frame of %d bytes exceeds %d", n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(c.rw, payload); err != nil {
		return 0, nil, err
	}
	return hdr[0], payload, nil
}

// Writer is an io.Writer that sends each write as frames of one kind.
type Writer struct {
	C    *Conn
	Kind byte
}

func (w Writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p
		if len(chunk) > 64<<10 {
			chunk = chunk[:64<<10]
		}
		if err := w.C.Write(w.Kind, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// ErrNoDaemon means nothing serves the control socket.
var ErrNoDaemon = errors.New("no sandboxd is serving")
