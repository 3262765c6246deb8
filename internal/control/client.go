package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Client talks to the daemon behind one harness dir.
type Client struct {
	HarnessDir string
}

// Dial opens a connection to the daemon and sends req.
func (c Client) Dial(ctx context.Context, req Request) (*Conn, net.Conn, error) {
	path := Socket(c.HarnessDir)
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("%w at %s: start it with `sandboxd serve`, or point --harness-dir (or SANDBOXD_HARNESS_DIR) at the harness dir of the one that runs", ErrNoDaemon, path)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, nil, fmt.Errorf("connect to %s: %w: the control socket is root's; run as root", path, err)
		}
		return nil, nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	conn := NewConn(nc)
	if err := conn.WriteJSON(KindJSON, req); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("send %s request: %w", req.Op, err)
	}
	return conn, nc, nil
}

// Call sends a one-document request and decodes the reply into out.
func (c Client) Call(ctx context.Context, req Request, out any) error {
	conn, nc, err := c.Dial(ctx, req)
	if err != nil {
		return err
	}
	defer nc.Close()
	go func() { <-ctx.Done(); nc.Close() }()
	kind, payload, err := conn.Read()
	if err != nil {
		return fmt.Errorf("read %s reply: %w", req.Op, err)
	}
	switch kind {
	case KindJSON:
		if out == nil {
			return nil
		}
		if raw, ok := out.(*json.RawMessage); ok {
			*raw = append((*raw)[:0], payload...)
			return nil
		}
		return json.Unmarshal(payload, out)
	case KindError:
		var f Failure
		if err := json.Unmarshal(payload, &f); err != nil {
			return fmt.Errorf("decode failure: %w", err)
		}
		return &f
	default:
		return fmt.Errorf("unexpected frame %q in %s reply", kind, req.Op)
	}
}

// Streams are the local ends of an exec.
type Streams struct {
	Stdin          io.Reader // nil: no stdin (the command sees EOF)
	Stdout, Stderr io.Writer
	Resize         <-chan Resize
	Signal         <-chan string
	// AbortOnStdinError makes an error reading Stdin end the request
	// instead of sending EOF: an archive cut short is no archive to unpack.
	AbortOnStdinError bool
}

// Exec runs a command through the daemon and returns how it ended; with
// req.Op "cp", a copy, whose archive streams the same way.
func (c Client) Exec(ctx context.Context, req Request, s Streams) (Exit, error) {
	if req.Op == "" {
		req.Op = "exec"
	}
	conn, nc, err := c.Dial(ctx, req)
	if err != nil {
		return Exit{}, err
	}
	defer nc.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			nc.Close()
		case <-done:
		}
	}()
	if s.Stdin != nil {
		go func() {
			if _, err := io.Copy(Writer{C: conn, Kind: KindStdin}, s.Stdin); err != nil && s.AbortOnStdinError {
				nc.Close()
				return
			}
			conn.Write(KindEOF, nil)
		}()
	}
	go func() {
		for {
			select {
			case r, ok := <-s.Resize:
				if !ok {
					return
				}
				conn.WriteJSON(KindResize, r)
			case sig, ok := <-s.Signal:
				if !ok {
					return
				}
				conn.Write(KindSignal, []byte(sig))
			case <-done:
				return
			}
		}
	}()
	for {
		kind, payload, err := conn.Read()
		if err != nil {
			if ctx.Err() != nil {
				return Exit{}, ctx.Err()
			}
			return Exit{}, fmt.Errorf("the daemon closed the session without an exit status (%v): see its log", err)
		}
		switch kind {
		case KindStdout:
			if _, err := s.Stdout.Write(payload); err != nil {
				return Exit{}, err
			}
		case KindStderr:
			if _, err := s.Stderr.Write(payload); err != nil {
				return Exit{}, err
			}
		case KindExit:
			var e Exit
			if err := json.Unmarshal(payload, &e); err != nil {
				return Exit{}, fmt.Errorf("decode exit: %w", err)
			}
			return e, nil
		case KindError:
			var f Failure
			if err := json.Unmarshal(payload, &f); err != nil {
				return Exit{}, fmt.Errorf("decode failure: %w", err)
			}
			return Exit{}, &f
		default:
			return Exit{}, fmt.Errorf("unexpected frame %q in exec", kind)
		}
	}
}
