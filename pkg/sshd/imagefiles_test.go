package sshd_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// The files the server looks at for a session (the login shell, /etc/hosts
// for ssh -L) lie in the filesystem the agent's root
// can write; a FIFO planted at any of them must not hang the server.

// runWithin runs command (or asks for subsystem) in a new session of c and
// fails the test when the session has not ended within d: a server stuck
// opening a FIFO never answers. A subsystem's exit status is not known to
// the client library, only what it wrote to stderr.
func runWithin(t *testing.T, c *ssh.Client, d time.Duration, subsystem, command string) (stdout, stderr string, code int) {
	t.Helper()
	sess, err := c.NewSession()
	require.NoError(t, err)
	defer sess.Close()
	var out, errb bytes.Buffer
	done := make(chan error, 1)
	if subsystem != "" {
		pipe, err := sess.StderrPipe()
		require.NoError(t, err)
		go func() {
			if err := sess.RequestSubsystem(subsystem); err != nil {
				done <- err
				return
			}
			_, err := io.Copy(&errb, pipe)
			done <- err
		}()
	} else {
		sess.Stdout, sess.Stderr = &out, &errb
		go func() { done <- sess.Run(command) }()
	}
	select {
	case err = <-done:
	case <-time.After(d):
		t.Fatalf("the session had not ended after %s: the server is stuck", d)
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitStatus()
	}
	require.NoError(t, err)
	return out.String(), errb.String(), 0
}

// TestFileServersAreNeverTheImages: the file servers are sandboxd's own,
// whatever the image holds at OpenSSH's paths: here a FIFO where the
// sftp-server was and an scp that leaves a mark, both made by the sandbox's
// root in its own copy of their directories.
func TestFileServersAreNeverTheImages(t *testing.T) {
	requireTool(t, "scp", "openssh-client")
	const server, scp = "/usr/lib/openssh/sftp-server", "/usr/bin/scp"
	ts := startServer(t, options{hide: imageFileServers})
	r := ts.sb.Sh(t, "0", "mkdir -p /usr/lib/openssh && mkfifo "+server+" && printf '#!/bin/sh\\ntouch /tmp/image-scp-ran\\n' >"+scp+" && chmod 755 "+scp)
	require.Equal(t, 0, r.Code, r.Stderr)
	sandboxtest.ReleaseFIFOAtCleanup(t, ts.sb.InView(server))

	c := sandboxtest.DialSSH(t, ts.addr, ts.agentSign)
	sess, err := c.NewSession()
	require.NoError(t, err)
	defer sess.Close()
	client, err := sftp.NewClient(c)
	require.NoError(t, err, "sftp starts with a FIFO at the image's sftp-server")
	f, err := client.Create("via-sftp.txt")
	require.NoError(t, err)
	_, err = f.Write([]byte("hello\n"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, client.Close())
	b, err := os.ReadFile(filepath.Join(ts.workdir, "via-sftp.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(b))

	src := filepath.Join(t.TempDir(), "src.txt")
	require.NoError(t, os.WriteFile(src, []byte("legacy\n"), 0o644))
	res := run(t, exec.Command("scp", append(ts.sshOpts(ts.agentKey), "-P", ts.port, "-O", src, "agent@127.0.0.1:via-legacy.txt")...), "")
	require.Equal(t, 0, res.code, res.stderr)
	b, err = os.ReadFile(filepath.Join(ts.workdir, "via-legacy.txt"))
	require.NoError(t, err)
	assert.Equal(t, "legacy\n", string(b))
	r = ts.sb.Sh(t, "0", "test -e /tmp/image-scp-ran")
	assert.NotEqual(t, 0, r.Code, "the image's scp ran")
}

func TestSessionSurvivesFifoLoginShell(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	shell := filepath.Join(dir, "shell")
	require.NoError(t, unix.Mkfifo(shell, 0o777))
	ts := startServer(t, options{shell: shell})
	sandboxtest.ReleaseFIFOAtCleanup(t, shell)

	c := sandboxtest.DialSSH(t, ts.addr, ts.agentSign)
	stdout, stderr, code := runWithin(t, c, 10*time.Second, "", "echo ran-by-$0")
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "ran-by-/bin/sh\n", stdout, "a login shell that is a FIFO falls back to /bin/sh")
}

func TestLocalForwardByNameSurvivesFifoHostsFile(t *testing.T) {
	// The sandbox's /etc/hosts is its own (the substrate's is never
	// touched): it names web.test when the server starts, and is a FIFO by
	// the time the client forwards to that name.
	ts := startServer(t, options{hide: []string{"/etc/hosts"}, prepare: func(sb *sandboxtest.Sandbox) {
		r := sb.Sh(t, "0", "echo '127.0.0.1 web.test' >/etc/hosts")
		require.Equal(t, 0, r.Code, r.Stderr)
	}})
	r := ts.sb.Sh(t, "0", "rm /etc/hosts && mkfifo /etc/hosts")
	require.Equal(t, 0, r.Code, r.Stderr)
	sandboxtest.ReleaseFIFOAtCleanup(t, ts.sb.InView("/etc/hosts"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lns, errs, err := ts.sb.Target.Listen(ctx, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	sandboxtest.ServeLine(t, lns[0], "hello-from-sandbox")

	c := sandboxtest.DialSSH(t, ts.addr, ts.agentSign)
	type dialed struct {
		nc  net.Conn
		err error
	}
	got := make(chan dialed, 1)
	go func() {
		nc, err := c.Dial("tcp", "web.test:8080")
		got <- dialed{nc, err}
	}()
	var d dialed
	select {
	case d = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("ssh -L to web.test had no answer after 10s: the server is stuck reading /etc/hosts")
	}
	require.NoError(t, d.err, "web.test was in the sandbox's hosts file when the server started")
	defer d.nc.Close()
	b, err := io.ReadAll(d.nc)
	require.NoError(t, err)
	assert.Equal(t, "hello-from-sandbox\n", string(b))
}
