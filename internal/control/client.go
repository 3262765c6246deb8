package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/internal/control/wire"
)

// Client talks to the daemon behind one harness dir.
type Client struct {
	HarnessDir string
}

// Dial opens a connection to the daemon and sends req; the end of ctx
// ends a wait for room in the daemon's listen queue.
func (c Client) Dial(ctx context.Context, req Request) (*Conn, io.Closer, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	conn, closer, err := wire.Dial(ctx, c.HarnessDir, b, nil)
	if err != nil {
		return nil, nil, err
	}
	return &Conn{conn}, closer, nil
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
type Streams = wire.Streams

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
	return wire.Session(ctx, conn.Conn, nc, s)
}
