package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/harness"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/reaper"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

const roleTestServe = "test-serve"

func init() {
	// A serve in a process of its own, for tests that kill it.
	childproc.Add(roleTestServe, func(args []string) int {
		err := Run(context.Background(), config.Config{HarnessDir: args[0], Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		return 0
	})
}

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// served is a daemon running in this test process.
type served struct {
	harness string
	client  control.Client
	cancel  context.CancelFunc
	done    chan error
	d       *Daemon
}

func serveForTest(t *testing.T, cfg config.Config) *served {
	t.Helper()
	sandboxtest.RequireRoot(t)
	// Grading elsewhere makes /tests for a moment; a serve starting then
	// would mask it, and bwrap would leave the mount point behind.
	sandboxtest.SharedTests(t)
	if cfg.HarnessDir == "" {
		cfg.HarnessDir = sandboxtest.HarnessDir(t)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := start(ctx, cfg)
	require.NoError(t, err)
	s := &served{harness: cfg.HarnessDir, client: control.Client{HarnessDir: cfg.HarnessDir}, cancel: cancel, done: make(chan error, 1), d: d}
	go func() { s.done <- d.serve(ctx) }()
	// Connectable, not merely present: the socket file exists from bind(2),
	// a moment before listen(2).
	require.Eventually(t, func() bool {
		c, err := net.Dial("unix", control.Socket(cfg.HarnessDir))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 5*time.Millisecond)
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

type execResult struct {
	stdout, stderr string
	exit           control.Exit
	err            error
}

func (s *served) exec(t *testing.T, req control.Request, stdin string) execResult {
	t.Helper()
	var out, errb bytes.Buffer
	streams := control.Streams{Stdout: &out, Stderr: &errb}
	if stdin != "" {
		streams.Stdin = strings.NewReader(stdin)
		req.Stdin = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exit, err := s.client.Exec(ctx, req, streams)
	return execResult{out.String(), errb.String(), exit, err}
}

func (s *served) sh(t *testing.T, script string) execResult {
	return s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", script}}, "")
}

func TestExecExitCodesAndStreams(t *testing.T) {
	s := serveForTest(t, config.Config{})
	for _, code := range []int{0, 1, 7} {
		r := s.sh(t, fmt.Sprintf("echo out; echo err >&2; exit %d", code))
		require.NoError(t, r.err)
		assert.Equal(t, code, r.exit.Code)
		assert.Equal(t, "out\n", r.stdout)
		assert.Equal(t, "err\n", r.stderr)
	}
	r := s.sh(t, "kill -TERM $$")
	require.NoError(t, r.err)
	assert.Equal(t, "TERM", r.exit.Signal)
	assert.Equal(t, 128+15, r.exit.Code)
}

// Stdin reaches the command and its EOF too
// (docs/failures.md#stdin-eof-reaches-the-command).
func TestExecStdinAndItsEOFReachTheCommand(t *testing.T) {
	s := serveForTest(t, config.Config{})
	r := s.exec(t, control.Request{Argv: []string{"sh", "-c", "cat; echo done"}}, "line one\nline two\n")
	require.NoError(t, r.err)
	assert.Equal(t, "line one\nline two\ndone\n", r.stdout)
}

// A timed-out command delivers what it printed before the deadline, and its
// whole tree is killed (docs/failures.md#output-streams-and-survives-a-timeout,
// docs/failures.md#timeout-kills-the-whole-tree).
func TestExecTimeoutKeepsOutputAndKillsTree(t *testing.T) {
	s := serveForTest(t, config.Config{})
	r := s.exec(t, control.Request{Timeout: "1s", Argv: []string{"sh", "-c",
		"echo before; (sleep 901 & sleep 902 & wait) & sleep 903 & sleep 30; echo after"}}, "")
	require.NoError(t, r.err)
	assert.True(t, r.exit.TimedOut)
	assert.Equal(t, "before\n", r.stdout)
	r = s.sh(t, "pgrep -f 'sleep 90[123]' || echo none")
	assert.Equal(t, "none\n", r.stdout, "the whole tree of the timed-out command is gone")
}

// A process the command backgrounds survives into the next exec
// (docs/failures.md#background-processes-outlive-their-command).
func TestBackgroundProcessSurvivesIntoNextExec(t *testing.T) {
	s := serveForTest(t, config.Config{})
	r := s.sh(t, "nohup sleep 600 >/dev/null 2>&1 & echo $! > /tmp/background.pid")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	r = s.sh(t, "kill -0 $(cat /tmp/background.pid) && echo alive")
	assert.Equal(t, "alive\n", r.stdout)
}

// A background child that keeps stdout does not hold the exec open: the
// session side of docs/failures.md#verifier-ends-when-its-leader-exits.
func TestBackgroundHoldingStdoutDoesNotHang(t *testing.T) {
	s := serveForTest(t, config.Config{})
	start := time.Now()
	r := s.sh(t, "sleep 30 & echo quick")
	require.NoError(t, r.err)
	assert.Equal(t, 0, r.exit.Code)
	assert.Equal(t, "quick\n", r.stdout)
	assert.Less(t, time.Since(start), 10*time.Second)
}

// Nothing of the daemon's environment reaches a session, the wrappers, or
// pid 1; a variable the task declares arrives intact even when its name
// looks internal (docs/failures.md#helpers-and-pid-1-start-with-path-only,
// docs/failures.md#harness-variables-stay-out-of-sessions).
func TestNoHarnessEnvironmentInSessions(t *testing.T) {
	t.Setenv("SANDBOXD_AUTHORIZED_KEYS", "ssh-ed25519 AAAA secret")
	t.Setenv("LD_PRELOAD", "/nonexistent/preload.so")
	t.Setenv("HARNESS_TOKEN", "hunter2")
	s := serveForTest(t, config.Config{AgentEnv: []string{"SANDBOXD_TASK_VAR=kept", "FOO=bar"}})
	r := s.sh(t, "env")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.NotContains(t, r.stdout, "secret")
	assert.NotContains(t, r.stdout, "hunter2")
	assert.NotContains(t, r.stdout, "LD_PRELOAD")
	assert.Contains(t, r.stdout, "SANDBOXD_TASK_VAR=kept\n")
	assert.Contains(t, r.stdout, "FOO=bar\n")

	// pid 1 keeps a capability sessions lack, so a session cannot read its
	// environment at all; read it from the substrate instead.
	r = s.sh(t, "cat /proc/1/environ")
	assert.NotEqual(t, 0, r.exit.Code, "a session reads pid 1's environment: %q", r.stdout)
	pid1, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.d.holder.PID))
	require.NoError(t, err)
	assert.NotContains(t, string(pid1), "secret")
	assert.NotContains(t, string(pid1), "hunter2")
	assert.NotContains(t, string(pid1), "LD_PRELOAD")
}

// A non-root agent still gets the image's ENV
// (docs/failures.md#non-root-agent-keeps-the-image-env).
func TestNonRootAgentGetsImageEnv(t *testing.T) {
	s := serveForTest(t, config.Config{AgentUser: "4321:4321", ImageEnv: []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "LANG=C.UTF-8"}})
	r := s.sh(t, "id -u; echo $PATH; echo $LANG; echo $HOME")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "4321\n/opt/tool/bin:/usr/bin:/bin\nC.UTF-8\n/\n", r.stdout)
}

// Reaping orphans never steals the exit status a session waits for
// (docs/failures.md#reaper-never-takes-a-session-exit-status). serve reaps
// its children that nothing waits for; as a subreaper, this test gets
// orphans as a container's PID 1 would.
func TestReaperDoesNotStealExitStatus(t *testing.T) {
	s := serveForTest(t, config.Config{})
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	// Orphans re-parented to us, to keep the reaper busy.
	require.NoError(t, exec.Command("sh", "-c", "for i in 1 2 3 4 5; do (sleep 0.$i &) ; done").Run())
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := s.sh(t, fmt.Sprintf("sleep 0.%d; exit %d", i%10, 10+i))
			assert.NoError(t, r.err)
			assert.Equal(t, 10+i, r.exit.Code)
		}(i)
	}
	wg.Wait()
	require.Eventually(t, func() bool { return len(reaper.Zombies()) == 0 }, 10*time.Second, 50*time.Millisecond, "orphans are reaped")
}

// Bad input gets a one-line error that says what to do, exit 125, and the
// daemon stays healthy.
func TestBadInputLeavesDaemonHealthy(t *testing.T) {
	s := serveForTest(t, config.Config{})
	cases := []struct {
		req  control.Request
		want string
	}{
		{control.Request{}, "no command given"},
		{control.Request{Argv: []string{"true"}, User: "no-such-user"}, "no-such-user"},
		{control.Request{Argv: []string{"true"}, Dir: "/no/such/dir"}, "working directory"},
		{control.Request{Argv: []string{"true"}, Timeout: "soon"}, "--timeout"},
		{control.Request{Argv: []string{"true"}, Env: []string{"NOEQUALS"}}, "NAME=VALUE"},
	}
	for _, c := range cases {
		r := s.exec(t, c.req, "")
		var f *control.Failure
		require.True(t, errors.As(r.err, &f), "%+v: %v", c.req, r.err)
		assert.Equal(t, 125, f.Code)
		assert.Contains(t, f.Message, c.want)
		assert.NotContains(t, f.Message, "\n")
	}
	r := s.exec(t, control.Request{Argv: []string{"no-such-program"}}, "")
	var f *control.Failure
	require.True(t, errors.As(r.err, &f))
	assert.Equal(t, 127, f.Code)
	assert.Equal(t, 0, s.sh(t, "true").exit.Code, "the daemon still serves")
}

func TestNoDaemonSaysHowToStartOne(t *testing.T) {
	c := control.Client{HarnessDir: t.TempDir()}
	_, err := c.Exec(context.Background(), control.Request{Argv: []string{"true"}}, control.Streams{})
	require.ErrorIs(t, err, control.ErrNoDaemon)
	assert.Contains(t, err.Error(), "sandboxd serve")
}

func TestSecondServeOnSameHarnessDirRefused(t *testing.T) {
	s := serveForTest(t, config.Config{})
	_, err := start(context.Background(), config.Config{HarnessDir: s.harness, Log: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, harness.ErrLocked)
	assert.Contains(t, err.Error(), "sandboxd stop")
}

// Stopping leaves no process of the sandbox behind, and the control socket
// goes with the daemon (docs/failures.md#stop-leaves-nothing-behind).
func TestStopLeavesNothing(t *testing.T) {
	s := serveForTest(t, config.Config{})
	require.Equal(t, 0, s.sh(t, "nohup sleep 777 >/dev/null 2>&1 &").exit.Code)
	holder := s.d.holder.PID
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "stop"}, nil))
	select {
	case err := <-s.done:
		require.NoError(t, err)
		s.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", holder))
	assert.True(t, gone(holder), "the holder is gone: %s", b)
	out, _ := exec.Command("pgrep", "-f", "sleep 777").Output()
	assert.Empty(t, strings.TrimSpace(string(out)))
	_, err := os.Stat(control.Socket(s.harness))
	assert.True(t, os.IsNotExist(err), "the control socket exists only while the sandbox is ready")
}

// A serve killed with SIGKILL takes its sandbox with it and leaves no
// stale lock: the next serve on the same harnessDir dir is refused only
// because an agent has had the root filesystem, and with ReuseRootfs it
// starts cleanly (docs/failures.md#stop-leaves-nothing-behind,
// docs/failures.md#a-used-root-filesystem-runs-nothing-as-root).
func TestCrashThenCleanRestart(t *testing.T) {
	sandboxtest.RequireRoot(t)
	harnessDir := sandboxtest.HarnessDir(t)
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, harnessDir)
	cmd.Env = append(os.Environ(), childproc.Env+"="+roleTestServe)
	require.NoError(t, cmd.Start())
	c := control.Client{HarnessDir: harnessDir}
	var st Status
	require.Eventually(t, func() bool { return c.Call(context.Background(), control.Request{Op: "status"}, &st) == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	require.Eventually(t, func() bool { return gone(st.Sandbox.PID) }, 5*time.Second, 10*time.Millisecond,
		"the holder dies with the daemon (--die-with-parent)")

	_, err = start(context.Background(), config.Config{HarnessDir: harnessDir, Log: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, harness.ErrRootfsUsed)
	s := serveForTest(t, config.Config{HarnessDir: harnessDir, ReuseRootfs: true})
	assert.Equal(t, 0, s.sh(t, "true").exit.Code)
}

// A holder killed from outside ends serve with an error: it fails closed
// rather than building a fresh sandbox without a word.
func TestHolderDeathFailsClosed(t *testing.T) {
	s := serveForTest(t, config.Config{})
	require.NoError(t, unix.Kill(s.d.holder.PID, unix.SIGKILL))
	select {
	case err := <-s.done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "died")
		s.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("serve kept running without its sandbox")
	}
}

func TestStatusReportsSandbox(t *testing.T) {
	s := serveForTest(t, config.Config{})
	var st Status
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "status"}, &st))
	assert.Equal(t, s.d.holder.PID, st.Sandbox.PID)
	assert.Equal(t, "identity", st.Sandbox.IDMap)
	assert.NotEmpty(t, st.Sandbox.Bwrap)
	for _, d := range st.Degradations {
		assert.NotContains(t, d, "id map")
	}
}

// gone reports whether pid has exited (a zombie waiting for a reaper that is
// not us counts as gone).
func gone(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err != nil || st.State == 'Z'
}

// exec -t: a real terminal from the sandbox's devpts, with the size asked for.
func TestExecWithTerminal(t *testing.T) {
	s := serveForTest(t, config.Config{})
	r := s.exec(t, control.Request{TTY: true, Term: "xterm", Cols: 100, Rows: 30, Argv: []string{"sh", "-c", "tty; stty size; echo $TERM; test -t 0 && echo stdin-is-tty"}}, "")
	require.NoError(t, r.err)
	require.Equal(t, 0, r.exit.Code, r.stdout)
	assert.Regexp(t, `^/dev/pts/\d+\r\n30 100\r\nxterm\r\nstdin-is-tty\r\n$`, r.stdout)
}

// Issue 7's limits that need no cgroup: a non-root agent's processes
// are bounded by RLIMIT_NPROC, every agent process is first for the OOM
// killer, and status says what holds.
func TestAgentProcessLimitAndOOMScore(t *testing.T) {
	s := serveForTest(t, config.Config{AgentUser: "4321:4321", AgentMaxProcs: 40})
	r := s.sh(t, "awk '/^Max processes/ {print $3, $4}' /proc/self/limits; cat /proc/self/oom_score_adj")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "40 40\n500\n", r.stdout)

	// A fork bomb in miniature: past 40 processes of its uid, fork fails.
	// dash gives up on the first fork that fails, with status 2.
	r = s.sh(t, `for i in $(seq 60); do sleep 30 & done`)
	assert.Equal(t, 2, r.exit.Code, "a fork failed: %s", r.stderr)
	sleeps := sandboxSleeps(t, s)
	assert.Greater(t, len(sleeps), 0, "the agent's sleeps started")
	assert.Less(t, len(sleeps), 40, "RLIMIT_NPROC stopped the non-root agent at 40 processes")

	st := s.d.Status()
	assert.Equal(t, uint64(40), st.Limits.AgentMaxProcs)
	assert.Equal(t, 500, st.Limits.SessionOOMScoreAdj)
	assert.Less(t, st.Limits.DaemonOOMScoreAdj, 500)
	assert.NotEmpty(t, st.Limits.Cgroup)
}

// Where a cgroup can be made (a bare host; a container whose engine
// delegates its cgroups), the agent's processes are in one with the task's
// limits and the pid limit, which stops a root agent too; where none can
// (a plain Docker container), status says why. The read-only /sys and the
// cleanup at stop hold for the group too
// (docs/failures.md#kernel-settings-stay-read-only,
// docs/failures.md#stop-leaves-nothing-behind).
func TestAgentCgroup(t *testing.T) {
	dir := taskDir(t, "[environment]\nmemory_mb = 512\ncpus = 1.5\n", "echo 1 > /logs/verifier/reward.txt")
	s := serveTask(t, dir, config.Config{AgentMaxProcs: 40})
	st := s.d.Status()
	if s.d.cgroup == nil {
		assert.Regexp(t, `^none: .+; the container engine`, st.Limits.Cgroup, "status says why there is no cgroup")
		t.Logf("no cgroup here: %s", st.Limits.Cgroup)
		return
	}
	assert.Contains(t, st.Limits.Cgroup, "memory 512 MiB, cpus 1.5, pids 40")
	// In every hierarchy the group was made in (v1: pids, memory and cpu,
	// joined through their tasks files): the copy that joins is one thread,
	// and what it then starts, the command and the command's children,
	// inherit all of them.
	group := fmt.Sprintf("sandboxd-agent-%d", s.d.holder.PID)
	dirs := cgroupDirs(group)
	require.NotEmpty(t, dirs)
	r := s.sh(t, "cat /proc/self/cgroup")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, len(dirs), strings.Count(r.stdout, group), "a session is in each of the agent's groups %v:\n%s", dirs, r.stdout)
	// v1 is joined through tasks (docs/failures.md#the-agents-cgroup-is-joined-by-thread),
	// which moves one thread: none of the daemon's own may be in the group.
	for _, f := range s.d.cgroup.JoinFiles() {
		if _, err := os.Stat(filepath.Join(filepath.Dir(f.Name()), "cgroup.controllers")); err != nil {
			assert.Equal(t, "tasks", filepath.Base(f.Name()), "a v1 group is joined by thread")
		}
	}
	threads, err := filepath.Glob("/proc/self/task/*/cgroup")
	require.NoError(t, err)
	for _, p := range threads {
		b, err := os.ReadFile(p)
		if err == nil {
			assert.NotContains(t, string(b), group, "a thread of the daemon is in the agent's group: %s", p)
		}
	}

	// /sys is read-only inside, so a root agent can neither lift its limits
	// nor move itself out of the group
	// (docs/failures.md#kernel-settings-stay-read-only).
	r = s.sh(t, `for f in $(find /sys/fs/cgroup -name pids.max -o -name memory.limit_in_bytes -o -name memory.max -o -name cgroup.procs -o -name tasks 2>/dev/null | head -200); do
  echo tried
  case $f in *cgroup.procs|*tasks) echo $$ > $f ;; *) echo 1000000 > $f ;; esac 2>/dev/null && echo "WROTE $f"
done; true`)
	assert.Contains(t, r.stdout, "tried", "the cgroup files are visible inside")
	assert.NotContains(t, r.stdout, "WROTE", "an agent rewrote its cgroup")

	// A root agent's fork bomb in miniature stops at the pid limit.
	r = s.sh(t, `for i in $(seq 60); do sleep 30 & done`)
	assert.NotEqual(t, 0, r.exit.Code, "a fork failed")
	sleeps := sandboxSleeps(t, s)
	assert.Greater(t, len(sleeps), 0)
	assert.Less(t, len(sleeps), 40, "the pid limit stopped a root agent")

	// The group goes with serve (docs/failures.md#stop-leaves-nothing-behind).
	s.cancel()
	require.NoError(t, <-s.done)
	s.done <- nil // for the test's own cleanup
	assert.Empty(t, cgroupDirs(group), "serve left its agent cgroup behind")
}

// cgroupDirs finds the directories named name in the cgroup hierarchies.
func cgroupDirs(name string) []string {
	var found []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == name {
			found = append(found, p)
			return filepath.SkipDir
		}
		if strings.Count(p, "/") > 8 {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// sandboxSleeps lists the `sleep` processes in s's sandbox (its pid
// namespace, whatever other tests run meanwhile) and kills them.
func sandboxSleeps(t *testing.T, s *served) []int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.d.holder.PID))
	require.NoError(t, err)
	var pids []int
	for _, pid := range procfs.PIDs() {
		theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if theirs == ns && strings.TrimSpace(string(comm)) == "sleep" {
			pids = append(pids, pid)
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	return pids
}

// A non-root agent gets POSIX shared memory as under Docker: /dev/shm is a
// sticky 1777 tmpfs of 64 MiB (where bwrap can make one: 0.5 and later).
func TestDevShmForNonRootAgent(t *testing.T) {
	s := serveForTest(t, config.Config{AgentUser: "4321:4321"})
	r := s.sh(t, "stat -c %a /dev/shm; echo x > /dev/shm/agent && echo wrote; df -k /dev/shm | awk 'NR==2 {print $2}'")
	if !s.d.holder.Version.Less(bwrap.Version{Minor: 5}) {
		require.Equal(t, 0, r.exit.Code, r.stderr)
		lines := strings.Fields(r.stdout)
		require.Len(t, lines, 3, r.stdout)
		assert.Equal(t, "1777", lines[0])
		assert.Equal(t, "wrote", lines[1])
		if !s.d.holder.Version.Less(bwrap.Version{Minor: 7}) {
			assert.Equal(t, "65536", lines[2], "64 MiB, as Docker's default")
		}
		return
	}
	assert.NotContains(t, r.stdout, "wrote", "bwrap %s cannot make /dev/shm writable", s.d.holder.Version)
}

// The working directory is resolved inside the sandbox, by the joined
// process: a directory that exists only in the substrate (the harness dir)
// is refused with the fix, never entered
// (docs/failures.md#working-directory-resolved-inside-the-sandbox).
func TestWorkdirResolvedInsideTheSandbox(t *testing.T) {
	s := serveForTest(t, config.Config{})
	r := s.exec(t, control.Request{Dir: s.harness + "/run", Argv: []string{"pwd"}}, "")
	var f *control.Failure
	require.True(t, errors.As(r.err, &f), "entered the harness dir: %q %v", r.stdout, r.err)
	assert.Equal(t, 125, f.Code)
	assert.Contains(t, f.Message, "cannot use working directory")
	assert.Empty(t, r.stdout)
}
