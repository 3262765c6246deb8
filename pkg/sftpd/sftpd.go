// Package sftpd is sandboxd's own file server: the `sftp` subsystem (with
// github.com/pkg/sftp) and the legacy scp sink and source (`scp -t`,
// `scp -f`), so that files move in and out on any image, also one without
// OpenSSH's sftp-server or scp (Debian, Ubuntu and python-slim images ship
// neither).
//
// It runs as a child role of the pinned binary, started through pkg/join's
// enter step exactly as a session is (Spec.Role): as the session's agent
// user, with the session's capabilities, seccomp filter and limits, in the
// sandbox's namespaces, in the agent's working directory. So every path it
// resolves, a symlink's target included, resolves inside the sandbox's view,
// where the harness dir is absent: nothing here needs to guard against
// escaping to the substrate, and the kernel's permission checks are the
// agent user's. Its stdin and stdout are the SSH channel. Like the session
// it is, it lives in the sandbox's pid namespace, where the agent can see
// and signal it: it holds nothing the agent user does not (its binary, at
// /proc/PID/exe, is the sealed in-memory copy, which nobody can write).
//
// sandboxd serves its own always, even where the image has OpenSSH's: the
// harness moves the task's inputs and the agent's artifacts through it, and
// a program of the image is one the agent may have rewritten.
package sftpd

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/pkg/sftp"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
)

// Role is the child role's name (join.Spec.Role).
const Role = "files"

// SFTP is the role's arguments for the sftp subsystem (join.Spec.Argv).
var SFTP = []string{"sftp"}

func init() { childproc.Add(Role, run) }

// run is the role: argv after its name is "sftp", or "scp" and the legacy
// server's arguments (SCP).
func run(args []string) int {
	// Descriptor 3 is this binary (join.Cmd); nothing here needs it.
	unix.Close(3)
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "sandboxd: the file server needs a protocol (sftp or scp)")
		return 2
	}
	switch args[0] {
	case "sftp":
		return serveSFTP(os.Stdin, os.Stdout)
	case "scp":
		return serveSCP(args[1:], os.Stdin, os.Stdout, os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "sandboxd: unknown file protocol %q\n", args[0])
	return 2
}

// pipeFd is f's descriptor if it is a pipe, which splice(2) moves data
// through, and -1 otherwise.
func pipeFd(f any) int {
	file, ok := f.(*os.File)
	if !ok {
		return -1
	}
	var st unix.Stat_t
	if unix.Fstat(int(file.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return -1
	}
	return int(file.Fd())
}

// stdio is the channel as one stream for the sftp server.
type stdio struct {
	io.Reader
	io.WriteCloser
}

// serveSFTP serves SFTP v3 with OpenSSH's extensions (posix-rename,
// statvfs, hardlink, limits) until the client closes the channel. Paths are
// relative to the working directory, as OpenSSH's sftp-server has them.
// Open files and their data are served in front of pkg/sftp (files.go);
// with limits@openssh.com (filter.go), reads and writes move up to maxIO
// bytes.
func serveSFTP(in io.Reader, out io.WriteCloser) int {
	// Bigger pipes (as far as an unprivileged process may: pipe-max-size)
	// let the daemon's relay run ahead by a few 255 KiB requests instead of
	// waking us every 64 KiB; anything else than a pipe refuses, harmlessly.
	for _, fd := range []int{0, 1} {
		unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, 1<<20)
	}
	replies := newReplies(out)
	// The reader holds little, so that the data of a WRITE is spliced
	// from the channel rather than copied out of its buffer (files.go).
	requests := &requests{r: bufio.NewReaderSize(in, 4<<10), out: replies, files: newFiles(pipeFd(in), pipeFd(out))}
	srv, err := sftp.NewServer(stdio{requests, replies}, sftp.WithMaxTxPacket(maxIO))
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd: sftp server: %v\n", err)
		return 1
	}
	if err := srv.Serve(); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd: sftp server: %v\n", err)
		return 1
	}
	return 0
}
