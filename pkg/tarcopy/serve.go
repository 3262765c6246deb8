package tarcopy

import (
	"context"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/internal/tail"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// Outcome is how the sandbox's side of a copy ended.
type Outcome struct {
	Exit  control.Exit
	State *os.ProcessState // the role's, with its rusage
	Bytes int64            // of archive, either way
}

// Serve does the sandbox's side of one copy for the daemon: the role,
// joined into the sandbox as a session is, packs c.Path onto
// conn as stdout frames, or unpacks the stdin frames the client sends at
// c.Path, owned by owner unless c.Archive. The reason of a failure has
// been sent as a stderr frame when it returns. A client that goes away,
// or ctx's end, kills the role.
func Serve(ctx context.Context, conn *control.Conn, t join.Target, c control.Copy, owner idmap.User) (Outcome, error) {
	p := c.Path
	if !path.IsAbs(p) {
		// As docker cp: a path inside is relative to the root.
		p = "/" + p
	}
	args := []string{"pack", p}
	if !c.Out {
		args = []string{"unpack", p, strconv.Itoa(int(owner.UID)), strconv.Itoa(int(owner.GID)), flag(c.Archive), flag(c.Raw)}
	}
	// Joined as a session is, as the sandbox's root with a session's
	// bounded capabilities (enough to read anything and to chown) and the
	// one of roleCaps, but without the agent's limits: the copy is the
	// harness's, and must not be the OOM killer's first pick or count
	// against the agent's cgroup.
	t.Limits = join.Limits{}
	st, err := t.Command(join.Spec{User: idmap.User{Name: "root"}, Dir: "/", Role: role, Argv: args, Caps: roleCaps})
	if err != nil {
		return Outcome{}, err
	}
	cmd := st.Cmd
	cmd.Pdeathsig = syscall.SIGKILL
	msg := tail.New(4 << 10)
	cmd.Stderr = msg
	var stdin *os.File
	var bytes atomic.Int64
	if c.Out {
		cmd.Stdout = records.CountingWriter{W: control.Writer{C: conn.Conn, Kind: control.KindStdout}, N: &bytes}
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return Outcome{}, err
		}
		defer r.Close()
		defer w.Close()
		cmd.Stdin, stdin = r, w
	}
	if _, err := st.Start(); err != nil {
		return Outcome{}, err
	}
	if stdin != nil {
		cmd.Stdin.(*os.File).Close()
	}
	// The client's frames: the archive coming in, and its end. A vanished
	// client, or one whose archive failed, ends the role.
	go func() {
		for {
			kind, payload, err := conn.Read()
			if err != nil {
				cmd.Process.Kill()
				return
			}
			switch {
			case kind == control.KindStdin && stdin != nil:
				n, err := stdin.Write(payload)
				bytes.Add(int64(n))
				if err != nil {
					// The role stopped reading: it has failed, and says why.
					stdin.Close()
					stdin = nil
				}
			case kind == control.KindEOF && stdin != nil:
				stdin.Close()
				stdin = nil
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	err = cmd.Wait()
	code, sig, ok := join.ExitStatus(err)
	if !ok {
		return Outcome{State: cmd.ProcessState}, err
	}
	exit := control.Exit{Code: code}
	if sig != 0 {
		exit.Signal = strings.TrimPrefix(unix.SignalName(sig), "SIG")
	}
	if s := msg.String(); s != "" {
		conn.Write(control.KindStderr, []byte(s))
	}
	return Outcome{Exit: exit, State: cmd.ProcessState, Bytes: bytes.Load()}, nil
}

// roleCaps are a session's capabilities and CAP_SYS_MODULE. A root agent
// may trace a process of its own uid, or read its /proc files, only while
// that process is dumpable and its permitted set lies within the agent's
// (cap_ptrace_access_check). The role is dumpable from its exec until its
// Go runtime has started and made it otherwise, long enough under load for
// an agent polling /proc; a permitted set the agent's never covers closes
// that moment as the exec commits the role's credentials. CAP_SYS_MODULE
// grants the role nothing: the kernel asks for it only in the initial user
// namespace, and the role holds it in the sandbox's, which every sandbox
// owns (docs/failures.md#a-root-agent-cannot-take-over-the-copys-side).
var roleCaps = append(slices.Clone(join.DefaultCaps), "CAP_SYS_MODULE")

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
