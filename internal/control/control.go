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
	"encoding/json"
	"io"

	"github.com/sandboxd/sandboxd/internal/control/wire"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// Frame kinds, and the bound on a frame: package wire's.
const (
	KindJSON   = wire.KindJSON
	KindStdin  = wire.KindStdin
	KindStdout = wire.KindStdout
	KindStderr = wire.KindStderr
	KindEOF    = wire.KindEOF
	KindResize = wire.KindResize
	KindSignal = wire.KindSignal
	KindExit   = wire.KindExit
	KindError  = wire.KindError
	MaxFrame   = wire.MaxFrame
)

// Socket is the control socket's path inside a harness dir.
func Socket(harnessDir string) string { return wire.Socket(harnessDir) }

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

// The exec's documents, written by the daemon with encoding/json and read
// by the client with package wire.
type (
	Resize  = wire.Resize
	Exit    = wire.Exit
	Failure = wire.Failure
)

// Conn frames a stream: package wire's framing, and JSON documents.
type Conn struct{ *wire.Conn }

// NewConn frames rw.
func NewConn(rw io.ReadWriter) *Conn { return &Conn{wire.NewConn(rw)} }

// WriteJSON sends v as one frame of the given kind.
func (c *Conn) WriteJSON(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Write(kind, b)
}

// Writer sends each write as frames of one kind.
type Writer = wire.Writer

// ErrNoDaemon means nothing serves the control socket.
var ErrNoDaemon = wire.ErrNoDaemon
