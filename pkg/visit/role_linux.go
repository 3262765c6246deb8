package visit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// The visitor is a child role: join.Cmd puts it in the sandbox's user and
// network namespaces, and it builds its own mount namespace there, starts the
// verifier, and reports. It holds full capabilities in the sandbox's user
// namespace until the enter step drops them for the verifier, so it runs only
// code from this binary and opens nothing the agent chose.

const roleVisitor = "visitor"

// Descriptors the visitor receives (fd 3 is this binary, see join.Cmd).
const (
	fdParams = 4 // params as JSON, in a memfd
	fdOutput = 5 // test-stdout.txt: the verifier's stdout and stderr
	fdResult = 6 // write end of the pipe the Report goes back on
)

func init() { childproc.Add(roleVisitor, visitor) }

// errReplaced means a mount point in the shared filesystem is no longer the
// directory the daemon checked: something in the sandbox swapped it.
var errReplaced = errors.New("the directory was replaced in the shared filesystem as the visit started")

func visitor(_ []string) int {
	// Mount namespaces are per thread in Go's view of the world: every mount
	// and the fork of the verifier happen on this one thread, which never
	// runs anything else and ends with the process.
	runtime.LockOSThread()
	// As pid 1 of its pid namespace the visitor gets only the signals it
	// handles from inside, and the Go runtime handles SIGTERM, SIGINT, SIGHUP
	// and the like by exiting: a verifier's `kill 1` would end grading as
	// sandboxd's failure. Every signal is taken and dropped here (the enter
	// step resets them to their defaults for the verifier); the daemon's
	// SIGKILL, from outside the namespace, still ends the visitor.
	signal.Notify(make(chan os.Signal, 1))
	// Nothing of ours reaches the verifier but its output: not even this
	// binary at descriptor 3.
	for fd := 3; fd <= fdResult; fd++ {
		unix.CloseOnExec(fd)
	}
	// The verifier runs code the agent planted. It shares our uid, so only
	// our being undumpable (and its smaller capability set) keeps it out of
	// /proc/1/fd, where the harness dir was open while the view was built.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	result := os.NewFile(fdResult, "result")
	report := func(r Report) int {
		json.NewEncoder(result).Encode(r)
		if r.Setup != "" || r.Start != "" {
			return join.ExitSetup
		}
		return r.Code
	}
	var p params
	params := os.NewFile(fdParams, "params")
	raw, err := io.ReadAll(io.LimitReader(params, 1<<20))
	params.Close()
	if err != nil {
		return report(Report{Setup: fmt.Sprintf("read visitor parameters: %v", err)})
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return report(Report{Setup: fmt.Sprintf("decode visitor parameters: %v", err)})
	}
	if os.Getpid() != 1 {
		return report(Report{Setup: "the visitor must be pid 1 of a pid namespace of its own"})
	}
	if err := buildView(p); err != nil {
		if errors.Is(err, errReplaced) {
			// The agent's doing, not ours: the verdict says so.
			return report(Report{Start: err.Error(), Code: join.ExitSetup})
		}
		return report(Report{Setup: err.Error()})
	}
	// We are pid 1 of the verifier's pid namespace: whatever it leaves
	// behind is re-parented to us, and ends with us (the daemon's SIGKILL at
	// the timeout, or our parent-death signal, takes the whole namespace).
	return report(runVerifier(p.Spec))
}

// runVerifier starts the verifier through the same enter step as a session
// and waits for the leader only: a background child holding the output open
// must not hold up grading (docs/failures.md#verifier-ends-when-its-leader-exits).
// Then it ends everything left below us.
func runVerifier(spec join.Spec) Report {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return Report{Setup: fmt.Sprintf("open %s: %v", os.DevNull, err)}
	}
	defer devnull.Close()
	output := os.NewFile(fdOutput, "test-stdout.txt")
	st, err := join.Here(spec)
	if err != nil {
		return Report{Start: err.Error()}
	}
	st.Cmd.Stdin, st.Cmd.Stdout, st.Cmd.Stderr = devnull, output, output
	leader, err := st.Start()
	if err != nil {
		st.Cmd.Wait()
		killLeftovers()
		var se *join.SetupError
		if errors.As(err, &se) {
			return Report{Start: se.Msg, Code: se.Code}
		}
		return Report{Start: err.Error()}
	}
	// As pid 1 we reap whatever the verifier orphans while it runs, so that
	// a process of its that has exited is gone, not a zombie that still
	// answers kill -0, until the leader itself exits. Its stdout and stderr
	// are files: there is nothing to copy, so nothing but the status to
	// wait for.
	var ws unix.WaitStatus
	for {
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			killLeftovers()
			return Report{Setup: fmt.Sprintf("wait for the verifier: %v", err)}
		}
		if pid == leader.PID {
			break
		}
	}
	killLeftovers()
	if ws.Signaled() {
		return Report{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	return Report{Code: ws.ExitStatus()}
}

// killLeftovers kills every process of the verifier's pid namespace but
// us, and reaps them, however they detached (setsid, double fork, nohup):
// as its pid 1, kill(-1) reaches exactly them.
func killLeftovers() {
	for {
		unix.Kill(-1, syscall.SIGKILL)
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); err == unix.ECHILD {
			return
		}
	}
}
