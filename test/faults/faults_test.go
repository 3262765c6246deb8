// Package faults breaks sandboxd's surroundings while it serves — the holder
// killed, the daemon signalled, clients that vanish mid-stream, entrypoints
// that die — and checks that it fails closed or serves on, as issue 7 asks.
// serve runs here as the real binary (built once per run from ./cmd/sandboxd),
// so that signals reach it exactly as they would in a container.
//
//	go test -count=1 -v ./test/faults/
package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// sandboxd builds ./cmd/sandboxd once for the whole run.
func sandboxd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandboxd-faults-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "sandboxd")
		root, _ := filepath.Abs("../..")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/sandboxd")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sandboxd: %v: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// server is `sandboxd serve` running as a process of its own.
type server struct {
	cmd     *exec.Cmd
	harness string
	workdir string
	client  control.Client
	status  daemon.Status
	stderr  *sandboxtest.Buffer
	exited  chan struct{}
	waitErr error
}

type taskSpec struct {
	toml     string // added to task.toml
	sandboxd string // sandboxd.toml
	testSh   string // tests/test.sh body
}

// writeTask writes a Harbor task into the harness dir's tasks, as adapt bakes it.
func writeTask(t *testing.T, harness string, spec taskSpec) string {
	t.Helper()
	name := "fault-task-" + randomHex(4)
	dir := filepath.Join(config.TasksDir(harness), name)
	test := spec.testSh
	if test == "" {
		test = "echo 1 > /logs/verifier/reward.txt\n"
	}
	files := map[string]string{
		"task.toml":      "schema_version = \"1.1\"\n\n[verifier]\ntimeout_sec = 120.0\n" + spec.toml,
		"instruction.md": "Survive.\n",
		"tests/test.sh":  "#!/bin/sh\n" + test,
	}
	if spec.sandboxd != "" {
		files["sandboxd.toml"] = spec.sandboxd
	}
	for f, body := range files {
		p := filepath.Join(dir, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	}
	return name
}

// startServe starts serve on harness (a fresh one when ""), serving task,
// with extra flags.
func startServe(t *testing.T, harness, task string, extra ...string) *server {
	t.Helper()
	return startServeIn(t, harness, "", task, extra...)
}

// startServeIn is startServe with a workdir of the caller's ("" for a fresh one).
func startServeIn(t *testing.T, harness, workdir, task string, extra ...string) *server {
	sandboxtest.SharedTests(t)
	t.Helper()
	sandboxtest.RequireRoot(t)
	if harness == "" {
		harness = sandboxtest.HarnessDir(t)
	}
	if workdir == "" {
		workdir = t.TempDir()
	}
	s := &server{harness: harness, workdir: workdir, client: control.Client{HarnessDir: harness}, stderr: &sandboxtest.Buffer{}, exited: make(chan struct{})}
	require.NoError(t, os.Chmod(s.workdir, 0o1777))
	args := []string{"serve", "--harness-dir", harness, "--workdir", s.workdir, "--listen", "127.0.0.1:0", "--host", "--log-format", "text", "--harness-keys", harnessKeysFile(t)}
	if task != "" {
		args = append(args, "--task", task)
	}
	args = append(args, extra...)
	s.cmd = exec.Command(sandboxd(t), args...)
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, s.cmd.Start())
	go func() { s.waitErr = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", s.stderr.String())
		}
	})
	require.Eventually(t, func() bool {
		select {
		case <-s.exited:
			t.Fatalf("serve exited: %v\n%s", s.waitErr, s.stderr.String())
		default:
		}
		return s.client.Call(context.Background(), control.Request{Op: "status"}, &s.status) == nil
	}, 30*time.Second, 20*time.Millisecond)
	return s
}

func (s *server) exec(script string, timeout time.Duration) (string, control.Exit, error) {
	var out sandboxtest.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	exit, err := s.client.Exec(ctx, control.Request{Argv: []string{"/bin/sh", "-c", script}}, control.Streams{Stdout: &out, Stderr: &out})
	return out.String(), exit, err
}

// waitExit waits for serve to end and returns its exit code.
func (s *server) waitExit(d time.Duration) (int, bool) {
	select {
	case <-s.exited:
	case <-time.After(d):
		return 0, false
	}
	if s.waitErr == nil {
		return 0, true
	}
	if ee, ok := s.waitErr.(*exec.ExitError); ok {
		return ee.ExitCode(), true
	}
	return -1, true
}

// nsOf reads /proc/PID/ns/KIND.
func nsOf(pid int, kind string) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	return l
}

// survivors lists every process still in the sandbox's pid or user
// namespace: sandbox processes, joined helpers, visitors.
func survivors(pidNS, userNS string) []string {
	var out []string
	for _, pid := range procfs.PIDs() {
		if (pidNS != "" && nsOf(pid, "pid") == pidNS) || (userNS != "" && nsOf(pid, "user") == userNS) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' {
				continue // a zombie waiting for a parent that is not ours
			}
			out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return out
}

// Killing the holder mid-session ends the sessions with a message that says
// why, and serve fails closed: it exits non-zero rather than build a fresh
// sandbox without a word.
func TestHolderKilledMidSession(t *testing.T) {
	s := startServe(t, "", "")
	type ended struct {
		out  string
		exit control.Exit
		err  error
	}
	execDone := make(chan ended, 1)
	go func() {
		out, exit, err := s.exec("echo started; sleep 300", time.Minute)
		execDone <- ended{out, exit, err}
	}()
	// An SSH session too, with a terminal, as an agent's shell would be.
	c := sshClient(t, s)
	sess, err := c.NewSession()
	require.NoError(t, err)
	require.NoError(t, sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	var sshOut sandboxtest.Buffer
	sess.Stdout, sess.Stderr = &sshOut, &sshOut
	require.NoError(t, sess.Start("echo ssh-started; sleep 300"))
	sshOut.WaitFor(t, "ssh-started")
	time.Sleep(200 * time.Millisecond)

	require.NoError(t, unix.Kill(s.status.Sandbox.PID, unix.SIGKILL))

	select {
	case e := <-execDone:
		t.Logf("exec ended: exit %+v, err %v, output %q", e.exit, e.err, e.out)
		assert.Contains(t, e.out, "started")
		msg := e.out
		if e.err != nil {
			msg += e.err.Error()
		}
		assert.Regexp(t, `(?i)sandbox`, msg, "the exec's client is told the sandbox is gone, not just killed")
	case <-time.After(20 * time.Second):
		t.Fatal("the exec session did not end when the sandbox died")
	}
	sshErr := make(chan error, 1)
	go func() { sshErr <- sess.Wait() }()
	select {
	case err := <-sshErr:
		t.Logf("ssh session ended: %v, output %q", err, sshOut.String())
		assert.Regexp(t, `(?i)sandbox`, sshOut.String(), "the SSH client is told the sandbox is gone")
	case <-time.After(20 * time.Second):
		t.Fatal("the SSH session did not end when the sandbox died")
	}
	code, ok := s.waitExit(20 * time.Second)
	require.True(t, ok, "serve kept running without its sandbox")
	assert.NotEqual(t, 0, code, "serve fails closed")
	assert.Contains(t, s.stderr.String(), "died", "serve says why")
	_, err = os.Stat(control.Socket(s.harness))
	assert.True(t, os.IsNotExist(err), "the control socket is gone")
}

// SIGTERM (docker stop) and, separately, SIGKILL: no process of the sandbox
// survives either, the verifier of a grading in flight included; after the
// SIGKILL a serve on the same harness dir is refused, the root filesystem
// being the agent's, and with --reuse-rootfs starts cleanly
// (docs/failures.md#stop-leaves-nothing-behind,
// docs/failures.md#verifier-children-end-with-it).
func TestDaemonSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			harness := sandboxtest.HarnessDir(t)
			task := writeTask(t, harness, taskSpec{testSh: "sleep 60\n"})
			s := startServe(t, harness, task)
			holder := s.status.Sandbox.PID
			pidNS, userNS := nsOf(holder, "pid"), nsOf(holder, "user")
			require.NotEmpty(t, pidNS)
			// Things that try to outlive their sandbox: a daemonized server,
			// a setsid'd process group, a nohup'd loop, a session in flight,
			// and a grading in progress (its visitor lives in the
			// substrate's pid namespace, in the sandbox's user namespace).
			out, _, err := s.exec(`setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &
nohup sh -c 'trap "" TERM HUP INT; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &
(sleep 1000 &) ; echo planted`, 30*time.Second)
			require.NoError(t, err)
			require.Contains(t, out, "planted")
			go s.exec("trap '' TERM; sleep 1000", time.Minute)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				s.client.Call(ctx, control.Request{Op: "grade"}, nil)
			}()
			require.Eventually(t, func() bool { return len(survivors(pidNS, userNS)) >= 6 }, 10*time.Second, 20*time.Millisecond,
				"the planted processes run: %v", survivors(pidNS, userNS))
			// The verifier lives in the substrate's pid namespace: wait until
			// it runs, so that the signal finds a grading in progress.
			require.Eventually(t, func() bool { return len(survivors("", userNS)) > len(survivors(pidNS, "")) }, 20*time.Second, 20*time.Millisecond,
				"the verifier runs: %v", survivors("", userNS))
			t.Logf("%d processes in the sandbox's namespaces before %s", len(survivors(pidNS, userNS)), sig)

			require.NoError(t, s.cmd.Process.Signal(sig))
			code, ok := s.waitExit(30 * time.Second)
			require.True(t, ok, "serve did not end on %s", sig)
			t.Logf("serve ended with %d on %s", code, sig)
			if sig == syscall.SIGTERM {
				assert.Equal(t, 0, code, "SIGTERM is a clean stop (docker stop): %s", s.stderr.String())
			}
			// Every process of the sandbox's own pid namespace goes with the
			// holder, whatever the signal (its teardown waits for the last
			// process to be reaped, which takes a while on a loaded machine).
			assert.Eventually(t, func() bool { return len(survivors(pidNS, "")) == 0 }, 60*time.Second, 50*time.Millisecond,
				"processes of the sandbox's pid namespace survived %s: %v", sig, survivors(pidNS, ""))
			gone := assert.Eventually(&quietT{}, func() bool { return len(survivors(pidNS, userNS)) == 0 }, 15*time.Second, 50*time.Millisecond)
			// The verifier in flight lives in the substrate's pid namespace;
			// it goes too, even when serve is not a container's PID 1 (this
			// test, a host trial): the visitor's parent-death signal.
			assert.True(t, gone, "processes of the sandbox survived %s: %v", sig, survivors(pidNS, userNS))

			if sig == syscall.SIGKILL {
				// The next serve on the same harness dir is refused, for
				// the agent has had this root filesystem
				// (docs/failures.md#a-used-root-filesystem-runs-nothing-as-root);
				// told to reuse it, it starts cleanly: no stale lock or
				// socket is in the way.
				refused := exec.Command(sandboxd(t), "serve", "--harness-dir", harness, "--host", "--listen", "127.0.0.1:0", "--task", task)
				refused.Env = []string{"PATH=" + os.Getenv("PATH")}
				said, err := refused.CombinedOutput()
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee, "a second serve on a used root filesystem: %s", said)
				assert.Equal(t, 125, ee.ExitCode())
				assert.Contains(t, string(said), "this root filesystem has already been an agent's")
				next := startServe(t, harness, task, "--reuse-rootfs")
				out, exit, err := next.exec("echo fresh", 30*time.Second)
				require.NoError(t, err)
				assert.Equal(t, 0, exit.Code)
				assert.Equal(t, "fresh\n", out)
				assert.NotEqual(t, holder, next.status.Sandbox.PID)
			} else {
				_, err := os.Stat(control.Socket(harness))
				assert.True(t, os.IsNotExist(err), "the control socket goes with a clean stop")
			}
		})
	}
}

// Clients that vanish mid-output and mid-upload leave nothing behind and
// corrupt nothing; one that vanishes mid-grade still gets its verdict made,
// and it can be read afterwards from the harness dir.
func TestClientDisconnects(t *testing.T) {
	harness := sandboxtest.HarnessDir(t)
	task := writeTask(t, harness, taskSpec{testSh: "sleep 2; echo 1 > /logs/verifier/reward.txt\n"})
	s := startServe(t, harness, task)

	t.Run("mid-output", func(t *testing.T) {
		conn, nc, err := s.client.Dial(context.Background(), control.Request{Op: "exec", Argv: []string{"/bin/sh", "-c", "echo $$ > out.pid; yes flood"}})
		require.NoError(t, err)
		_, _, err = conn.Read()
		require.NoError(t, err)
		nc.Close()
		// The flooding command is killed with its client.
		require.Eventually(t, func() bool {
			out, _, _ := s.exec(`kill -0 $(cat out.pid) 2>/dev/null && echo alive || echo gone`, 10*time.Second)
			return out == "gone\n"
		}, 10*time.Second, 50*time.Millisecond)
		c := sshClient(t, s)
		sess, err := c.NewSession()
		require.NoError(t, err)
		require.NoError(t, sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
		stdout, _ := sess.StdoutPipe()
		require.NoError(t, sess.Start("echo $$ > ssh.pid; yes flood"))
		io.CopyN(io.Discard, stdout, 1<<20)
		c.Close() // the TCP connection goes, mid-flood
		require.Eventually(t, func() bool {
			out, _, _ := s.exec(`kill -0 $(cat ssh.pid) 2>/dev/null && echo alive || echo gone`, 10*time.Second)
			return out == "gone\n"
		}, 15*time.Second, 100*time.Millisecond, "the SSH session's command is hung up")
	})

	t.Run("mid-upload", func(t *testing.T) {
		// 64 MiB announced, 8 MiB sent, then the client goes.
		conn, nc, err := s.client.Dial(context.Background(), control.Request{Op: "exec", Stdin: true, Argv: []string{"/bin/sh", "-c", "cat > upload.bin; echo done > upload.done"}})
		require.NoError(t, err)
		chunk := bytes.Repeat([]byte("u"), 64<<10)
		for i := 0; i < 128; i++ {
			require.NoError(t, conn.Write(control.KindStdin, chunk))
		}
		nc.Close()
		time.Sleep(500 * time.Millisecond)
		out, exit, err := s.exec("ls -l upload.bin; cat upload.done 2>/dev/null || echo no-eof", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 0, exit.Code)
		assert.Contains(t, out, "no-eof", "a cut upload is not taken for a finished one")
		// Over SSH a dropped connection reaches the command as stdin EOF
		// before the hang-up, as under OpenSSH's sshd: a `cat > file` then
		// finishes with what arrived. The daemon must serve on all the same.
		c := sshClient(t, s)
		sess, err := c.NewSession()
		require.NoError(t, err)
		in, _ := sess.StdinPipe()
		require.NoError(t, sess.Start("cat > ssh-upload.bin; echo done > ssh-upload.done"))
		for i := 0; i < 64; i++ {
			in.Write(chunk)
		}
		c.Close()
		time.Sleep(3 * time.Second)
		out, exit, err = s.exec("ls -l ssh-upload.bin; cat ssh-upload.done 2>/dev/null || echo no-eof", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 0, exit.Code)
		t.Logf("after a dropped SSH upload: %s", strings.TrimSpace(out))
	})

	t.Run("mid-grade over the control socket", func(t *testing.T) {
		before := gradings(harness)
		conn, nc, err := s.client.Dial(context.Background(), control.Request{Op: "grade"})
		require.NoError(t, err)
		_ = conn
		time.Sleep(500 * time.Millisecond)
		nc.Close()
		v := waitVerdict(t, harness, before)
		assert.Equal(t, "1\n", v, "the verdict was still produced")
		out, _, err := s.exec("echo still-serving", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "still-serving\n", out)
	})

	t.Run("mid-grade over SSH with a harness key", func(t *testing.T) {
		// The harness's own door: `ssh harness@sandbox sandboxd grade`.
		before := gradings(harness)
		c := harnessSSH(t, s)
		sess, err := c.NewSession()
		require.NoError(t, err)
		require.NoError(t, sess.Start("sandboxd grade"))
		time.Sleep(500 * time.Millisecond)
		c.Close()
		v := waitVerdict(t, harness, before)
		assert.Equal(t, "1\n", v, "the verdict was still produced after the harness's SSH connection dropped")
	})
}

// gradings counts the grading directories in the harness dir.
func gradings(harness string) int {
	entries, _ := os.ReadDir(filepath.Join(harness, "grade"))
	return len(entries)
}

// waitVerdict waits for the grading after the first `before` ones to leave
// its reward, and returns it.
func waitVerdict(t *testing.T, harness string, before int) string {
	t.Helper()
	var reward []byte
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(filepath.Join(harness, "grade"))
		if len(entries) <= before {
			return false
		}
		for _, e := range entries {
			n, _ := strconv.Atoi(e.Name())
			if n > before {
				b, err := os.ReadFile(filepath.Join(harness, "grade", e.Name(), "verdict", "reward.txt"))
				if err == nil && len(b) > 0 {
					reward = b
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "no verdict appeared in %s/grade", harness)
	// Give an interrupted grading time to show itself: the verdict must
	// stay, and no further directory be left half-made.
	time.Sleep(time.Second)
	return string(reward)
}

// Entrypoints that exit, crash, or never become healthy are reported in
// status, and the daemon serves on.
func TestEntrypointFailures(t *testing.T) {
	cases := []struct {
		name       string
		sandboxd   string
		toml       string
		entrypoint string // the state status must report
		health     string
	}{
		{name: "exits", sandboxd: `entrypoint = ["/bin/sh", "-c", "exit 3"]`, entrypoint: "exited 3"},
		{name: "crashes", sandboxd: `entrypoint = ["/bin/sh", "-c", "kill -SEGV $$"]`, entrypoint: "killed by SEGV"},
		{name: "missing", sandboxd: `entrypoint = ["/no/such/entrypoint"]`, entrypoint: "failed"},
		{name: "never healthy", sandboxd: `entrypoint = ["/bin/sh", "-c", "exec sleep 1000"]`,
			toml: "\n[environment.healthcheck]\ncommand = \"false\"\ninterval_sec = 0.2\nretries = 2\n", entrypoint: "running", health: "unhealthy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			harness := sandboxtest.HarnessDir(t)
			task := writeTask(t, harness, taskSpec{sandboxd: c.sandboxd + "\n", toml: c.toml})
			s := startServe(t, harness, task)
			var st daemon.Status
			require.Eventually(t, func() bool {
				if s.client.Call(context.Background(), control.Request{Op: "status"}, &st) != nil {
					return false
				}
				return strings.HasPrefix(st.Entrypoint, c.entrypoint) && (c.health == "" || st.Health == c.health)
			}, 20*time.Second, 50*time.Millisecond, "status: entrypoint %q health %q", st.Entrypoint, st.Health)
			raw, _ := json.Marshal(st)
			t.Logf("status: %s", raw)
			out, exit, err := s.exec("echo serving", 10*time.Second)
			require.NoError(t, err)
			assert.Equal(t, 0, exit.Code)
			assert.Equal(t, "serving\n", out)
			var v grade.Verdict
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, s.client.Call(ctx, control.Request{Op: "grade"}, &v))
			assert.Equal(t, grade.StatusGraded, v.Status)
		})
	}
}

// An agent that fills the filesystem it shares with the harness dir (the
// container's root filesystem, in production) must not take grading down
// with it: the copy of the tests and the verdict need room the agent cannot
// take. Here both live on one small tmpfs, as they share the image's root.
func TestGradingOnAFullDisk(t *testing.T) {
	sandboxtest.RequireRoot(t)
	root, err := os.MkdirTemp("/media", "sandboxd-fulldisk-")
	require.NoError(t, err)
	require.NoError(t, unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16m,mode=0755"))
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH); os.Remove(root) })
	harness, workdir := filepath.Join(root, "harness"), filepath.Join(root, "work")
	require.NoError(t, os.MkdirAll(harness, 0o700))
	require.NoError(t, os.MkdirAll(workdir, 0o1777))
	require.NoError(t, os.WriteFile(filepath.Join(harness, masks.HarnessMarker), nil, 0o600))
	task := writeTask(t, harness, taskSpec{testSh: "echo 1 > /logs/verifier/reward.txt\n"})
	s := startServeIn(t, harness, workdir, task)
	out, _, err := s.exec("dd if=/dev/zero of=fill bs=64k 2>&1 | grep -i space; df -k . | tail -1", time.Minute)
	require.NoError(t, err)
	require.Contains(t, out, "No space left")
	var v grade.Verdict
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = s.client.Call(ctx, control.Request{Op: "grade"}, &v)
	t.Logf("grading on a full disk: %v %+v", err, v)
	require.NoError(t, err)
	assert.Equal(t, grade.StatusGraded, v.Status, "grading has room of its own: %s", v.Message)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)
}

// quietT lets assert.Eventually report to the caller instead of failing.
type quietT struct{}

func (quietT) Errorf(string, ...any) {}
