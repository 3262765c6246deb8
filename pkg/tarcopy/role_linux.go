package tarcopy

import (
	"bufio"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
)

// role is the child role that does the sandbox's side of a copy. It is
// joined into the sandbox as a session is (Serve), so every path it
// resolves, symlinks included, resolves in the sandbox's view, where the
// harness dir is absent. It holds a session's root capabilities and
// CAP_SYS_MODULE, which keeps a root agent from tracing it (roleCaps) and
// grants nothing in the sandbox's user namespace.
const role = "cp"

func init() { childproc.Add(role, runRole) }

// runRole: `pack PATH` writes PATH's archive on stdout; `unpack PATH UID
// GID ARCHIVE RAW` unpacks stdin at PATH. A failure is one line on stderr
// and exit 1.
func runRole(args []string) int {
	// The role runs as the sandbox's root in the sandbox's pid namespace,
	// outside the agent's cgroup and limits: undumpable, a root agent
	// (without CAP_SYS_PTRACE) can neither trace it nor read its memory,
	// environment or descriptors, so it cannot run itself there. Between
	// the exec and here the role's permitted set, wider than any
	// session's (roleCaps), does the same.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	err := roleMain(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 1
	}
	return 0
}

func roleMain(args []string) error {
	if len(args) == 2 && args[0] == "pack" {
		w := bufio.NewWriterSize(os.Stdout, 256<<10)
		if err := Pack(w, args[1], true, os.Stderr); err != nil {
			return err
		}
		return w.Flush()
	}
	if len(args) != 6 || args[0] != "unpack" {
		return fmt.Errorf("sandboxd cp role: bad arguments %q", args)
	}
	uid, err1 := strconv.Atoi(args[2])
	gid, err2 := strconv.Atoi(args[3])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("sandboxd cp role: bad owner %s:%s", args[2], args[3])
	}
	o := Options{UID: uid, GID: gid, Archive: args[4] == "1"}
	return Extract(bufio.NewReaderSize(os.Stdin, 256<<10), args[1], args[5] == "1", true, o)
}
