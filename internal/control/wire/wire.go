// Package wire is the control socket's framing and an exec's client side
// of it: what `sandboxd exec` needs to talk to the daemon, and nothing more.
//
// It must not import reflect, directly or not (so no encoding/json, fmt or
// encoding/binary): the exec client runs from a package init
// (internal/execclient), and Go initializes packages in import-path order
// as soon as their imports are; a package that waits for reflect waits for
// some fifty others, the daemon's libraries among them. The few JSON
// documents this side writes and reads are flat, and json.go handles them
// by hand; the daemon's side uses encoding/json on the same types.
package wire

import (
	"errors"
	"io"
	"strconv"
	"sync"
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

// DefaultHarnessDir is where sandboxd keeps its own state inside an image,
// its control socket among it.
const DefaultHarnessDir = "/media/sandboxd"

// Socket is the control socket's path inside a harness dir.
func Socket(harnessDir string) string {
	if harnessDir == "" {
		return "run/control.sock"
	}
	for len(harnessDir) > 1 && harnessDir[len(harnessDir)-1] == '/' {
		harnessDir = harnessDir[:len(harnessDir)-1]
	}
	return harnessDir + "/run/control.sock"
}

// ErrNoDaemon means nothing serves the control socket.
var ErrNoDaemon = errors.New("no sandboxd is serving")

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
	buf []byte // header and payload of a small frame, for one write
}

// NewConn frames rw.
func NewConn(rw io.ReadWriter) *Conn { return &Conn{rw: rw} }

// smallFrame is the largest payload sent in one write with its header. A
// header written on its own is a system call and, on the peer, a wake-up
// that reads five bytes; a larger payload is not worth the copy.
const smallFrame = 16 << 10

// Write sends one frame.
func (c *Conn) Write(kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return errors.New("control frame of " + strconv.Itoa(len(payload)) + " bytes exceeds " + strconv.Itoa(MaxFrame))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	hdr := append(c.buf[:0], kind, byte(len(payload)>>24), byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload)))
	if len(payload) <= smallFrame {
		c.buf = append(hdr, payload...)
		_, err := c.rw.Write(c.buf)
		return err
	}
	c.buf = hdr
	if _, err := c.rw.Write(hdr); err != nil {
		return err
	}
	_, err := c.rw.Write(payload)
	return err
}

// Read receives one frame.
func (c *Conn) Read() (kind byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.rw, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := uint32(hdr[1])<<24 | uint32(hdr[2])<<16 | uint32(hdr[3])<<8 | uint32(hdr[4])
	if n > MaxFrame {
		return 0, nil, errors.New("control frame of " + strconv.FormatUint(uint64(n), 10) + " bytes exceeds " + strconv.Itoa(MaxFrame))
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
