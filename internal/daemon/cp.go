package daemon

import (
	"context"
	"net"
	"time"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

// copy serves one `sandboxd cp` on the control socket: the sandbox's side
// runs in pkg/tarcopy's role, joined into the sandbox's view.
func (d *Daemon) copy(ctx context.Context, conn *control.Conn, nc net.Conn, req control.Request) {
	fail := func(msg string) {
		d.log.Warn("cp refused", "reason", msg)
		conn.WriteJSON(control.KindError, control.Failure{Code: 125, Message: msg})
	}
	if req.Copy == nil || req.Copy.Path == "" {
		fail("cp names no path inside the sandbox: write sandboxd cp SRC sandbox:PATH, or sandbox:PATH DST")
		return
	}
	owner := d.agent
	if req.User != "" {
		u, err := d.execUser(req.User)
		if err != nil {
			fail(err.Error())
			return
		}
		owner = u
	}
	start := time.Now()
	out, err := tarcopy.Serve(ctx, conn, d.target, *req.Copy, owner)
	if err != nil {
		fail(err.Error())
		return
	}
	exit := out.Exit
	d.recordCopy(req, owner, start, out)
	conn.WriteJSON(control.KindExit, exit)
	d.log.Info("cp ended", "path", req.Copy.Path, "out", req.Copy.Out, "code", exit.Code)
	if uc, ok := nc.(*net.UnixConn); ok {
		uc.CloseWrite()
	}
}
