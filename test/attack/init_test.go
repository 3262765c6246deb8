package attack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// TestEscape_SandboxInit goes for the sandbox's pid 1, the holder's payload:
// the one process of the harness the agent can see. Ptrace, its memory, its
// descriptors: any of them lets a root agent end the sandbox (and with it
// the rollout: serve fails closed) or take what pid 1 holds.
func TestEscape_SandboxInit(t *testing.T) {
	requireTools(t, "/usr/bin/python3")
	forAgents(t, rolloutOptions{}, func(t *testing.T, agent string, r *rollout) {
		r.try(t, agent, []attempt{
			{name: "ptrace the sandbox's pid 1", sh: `{PY} ptrace 1`},
			{name: "open /proc/1/mem for writing", sh: `{PY} memwrite 1`},
			{name: "read pid 1's memory (process_vm_readv)", sh: `{PY} vmread 1`},
			{name: "read pid 1's descriptors and executable", sh: `readlink /proc/1/fd/0 /proc/1/exe >/dev/null`},
		}, nil)
		if runtime.GOARCH != "amd64" {
			return // the code written into pid 1 below is x86-64
		}
		x := r.sh(r.expand(`{PY} killinit`, nil))
		time.Sleep(time.Second)
		ok := true
		detail := x.output()
		y := r.sh("echo alive")
		if y.err != nil || y.stdout != "alive\n" {
			ok = false
			detail += fmt.Sprintf("\nafterwards a new session fails: %v %q", y.err, y.output())
		}
		select {
		case err := <-r.done:
			ok = false
			detail += fmt.Sprintf("\nserve ended: %v", err)
			r.done <- err
		default:
		}
		record(t, "make pid 1 exit by writing into /proc/1/mem (ends the sandbox and serve)", ok, detail)
	})
}

const roleServeInherited = "attack-serve-inherited"

func init() {
	// serve, started by a parent that leaked a descriptor to it (fd 77, not
	// close-on-exec), as a CI runner, a harness's process manager or a
	// shell tool may: bash keeps fd 255, some tools keep pipes around.
	childproc.Add(roleServeInherited, func(args []string) int {
		fd, err := unix.Open(args[2], unix.O_RDONLY, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		if err := unix.Dup2(fd, 77); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		unix.Close(fd)
		ctx, stop := context.WithCancel(context.Background())
		go func() {
			// The parent closes our stdin to stop us.
			var b [1]byte
			os.Stdin.Read(b[:])
			stop()
		}()
		err = daemon.Run(ctx, config.Config{HarnessDir: args[0], Workdir: args[1], HostMode: !inContainerRun, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		return 0
	})
}

// TestEscape_InheritedDescriptors: whatever descriptor the daemon inherited
// must not reach the sandbox, where a root agent opens anything under
// /proc/1/fd.
func TestEscape_InheritedDescriptors(t *testing.T) {
	sandboxtest.RequireRoot(t)
	harness := sandboxtest.HarnessDir(t)
	workdir := tmpfsDir(t, 8)
	secret := "INHERITED-FD-SECRET-" + randomHex(12)
	secretFile := filepath.Join(t.TempDir(), "harness-secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, harness, workdir, secretFile)
	cmd.Env = append(os.Environ(), childproc.Env+"="+roleServeInherited)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stderr := &sandboxtest.Buffer{Max: outputMax}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	c := control.Client{HarnessDir: harness}
	require.Eventually(t, func() bool {
		return c.Call(context.Background(), control.Request{Op: "status"}, nil) == nil
	}, 20*time.Second, 20*time.Millisecond, "serve: %s", stderr.String())
	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			out := &sandboxtest.Buffer{Max: outputMax}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Exec(ctx, control.Request{User: a.user, Argv: []string{"/bin/sh", "-c",
				`ls -l /proc/1/fd/ 2>&1; timeout 2 cat /proc/1/fd/77 2>&1`}}, control.Streams{Stdout: out, Stderr: out})
			require.NoError(t, err)
			record(t, "read the daemon's inherited descriptor through /proc/1/fd", !strings.Contains(out.String(), secret), out.String())
		})
	}
}
