// Package entrypoint runs the image's ENTRYPOINT inside the sandbox as
// Docker would have run it (Harbor keeps the entrypoint and replaces only
// the command), and keeps what it prints in a bounded log of the harness's.
package entrypoint

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// Config is one entrypoint's run.
type Config struct {
	Target join.Target
	Spec   join.Spec // the image's user, its environment, the workdir and the ENTRYPOINT
	LogDir string    // in the harness dir: entrypoint.log goes there
	Log    *slog.Logger
	// State is told what becomes of the entrypoint: "running", "exited N",
	// "killed by SIG", "failed to start: …".
	State func(string)
}

// Start runs the entrypoint. Its stdout and stderr are one pipe, as under
// Docker: the daemon reads it and writes LogDir/entrypoint.log, which
// nothing in the sandbox can open (a file of the harness as the
// entrypoint's stdout was one for the agent too, through /proc/PID/fd/1).
// If it exits or crashes, that is logged and told to State; serving goes
// on. done waits for the entrypoint and for its log to be written to the
// end; the sandbox must be going for it to return.
func Start(ctx context.Context, c Config) (done func(), err error) {
	argv := c.Spec.Argv
	out, err := openLog(c.LogDir)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		out.close()
		return nil, fmt.Errorf("entrypoint: output pipe: %w", err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		out.copy(pr, c.Log)
	}()
	wait := func() {
		select {
		case <-logged:
		case <-time.After(drain):
			// Something outside the sandbox holds the pipe open: stop
			// rather than hold serve's end.
			pr.SetReadDeadline(time.Now())
			<-logged
		}
		pr.Close()
	}
	st, err := c.Target.Command(c.Spec)
	if err != nil {
		pw.Close()
		wait()
		return nil, fmt.Errorf("entrypoint %q: %w", argv, err)
	}
	growPipe(pw)
	st.Cmd.Stdout, st.Cmd.Stderr = pw, pw
	proc, err := st.Start()
	// The entrypoint holds its own copy now (or never will): EOF comes
	// when it and whatever it started have all closed theirs.
	pw.Close()
	if err != nil {
		c.State(fmt.Sprintf("failed to start: %v", err))
		c.Log.Error("entrypoint failed to start", "argv", argv, "err", err)
		return wait, nil
	}
	c.State("running")
	c.Log.Info("entrypoint started", "argv", argv, "pid", proc.PID, "uid", c.Spec.User.UID)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		err := st.Cmd.Wait()
		code, sig, _ := join.ExitStatus(err)
		state := fmt.Sprintf("exited %d", code)
		if sig != 0 {
			state = "killed by " + ptyrelay.SignalName(sig)
		}
		c.State(state)
		if ctx.Err() == nil {
			c.Log.Warn("entrypoint ended", "argv", argv, "state", state)
		}
	}()
	return func() { <-exited; wait() }, nil
}
