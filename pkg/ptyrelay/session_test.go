package ptyrelay_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

func spec(t *testing.T, user string, argv ...string) join.Spec {
	t.Helper()
	u, err := idmap.Lookup("/", user)
	require.NoError(t, err)
	return join.Spec{User: u, Env: []string{"PATH=" + childproc.DefaultPath, "HOME=" + u.Home}, Argv: argv}
}

func sh(t *testing.T, user, script string) join.Spec {
	return spec(t, user, "/bin/sh", "-c", script)
}

func start(t *testing.T, cfg ptyrelay.Config) *ptyrelay.Session {
	t.Helper()
	s, err := ptyrelay.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Kill()
		s.Wait()
	})
	return s
}

func waitExit(t *testing.T, s *ptyrelay.Session) ptyrelay.Exit {
	t.Helper()
	select {
	case <-s.Done():
		return s.Wait()
	case <-time.After(30 * time.Second):
		t.Fatal("session did not end")
		return ptyrelay.Exit{}
	}
}

func TestPTYFromTheSandboxDevpts(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "1000:1000", "tty; stat -c '%u %G %a' $(tty)"),
		PTY:    &ptyrelay.PTY{Term: "xterm", Size: ptyrelay.Size{Cols: 80, Rows: 24}},
		Stdout: &out,
	})
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code, out.String())
	assert.Regexp(t, `^/dev/pts/\d+\r\n1000 tty 620\r\n$`, out.String())
	assert.Equal(t, s.TTY(), strings.SplitN(out.String(), "\r\n", 2)[0])
}

func TestSudoSeesATerminal(t *testing.T) {
	if _, err := os.Stat("/usr/bin/sudo"); err != nil {
		t.Skip("needs sudo in the image (apt-get install sudo)")
	}
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	// sudo opens the terminal by name for its prompt and refuses to run
	// without one when asked for -S-less input; -n with a terminal present
	// proves the lookup works without needing a password.
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "0", "sudo -n tty"),
		PTY:    &ptyrelay.PTY{Term: "xterm", Size: ptyrelay.Size{Cols: 80, Rows: 24}},
		Stdout: &out,
	})
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code, out.String())
	assert.Regexp(t, `/dev/pts/\d+`, out.String())
}

func TestPTYIsATerminalWithSizeAndTerm(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "0", `test -t 0 && test -t 1 && test -t 2 && echo isatty; stty size; echo "TERM=$TERM"`),
		PTY:    &ptyrelay.PTY{Term: "xterm-256color", Size: ptyrelay.Size{Cols: 132, Rows: 43}},
		Stdout: &out,
	})
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code)
	assert.Equal(t, "isatty\r\n43 132\r\nTERM=xterm-256color\r\n", out.String())
}

func TestControllingTerminalAndForegroundGroup(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	// Fields 5 and 8 of /proc/self/stat are the process group and the
	// terminal's foreground group; /dev/tty opens only with a controlling
	// terminal.
	s := start(t, ptyrelay.Config{
		Target: sb.Target,
		Spec:   sh(t, "1000:1000", `exec 3</dev/tty && echo devtty-ok; set -- $(sed 's/.*) //' /proc/self/stat); echo "pgrp=$3 tpgid=$6"`),
		PTY:    &ptyrelay.PTY{Term: "xterm"},
		Stdout: &out,
	})
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code, out.String())
	assert.Contains(t, out.String(), "devtty-ok")
	m := regexp.MustCompile(`pgrp=(\d+) tpgid=(\d+)`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	assert.Equal(t, m[1], m[2], "the session's group is the terminal's foreground group")
}

func TestResizeNeverDisturbsInput(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	inR, inW := io.Pipe()
	s := start(t, ptyrelay.Config{
		Target: sb.Target,
		Spec:   sh(t, "0", `stty -echo; while read l; do echo "got $l"; [ "$l" = 49 ] && exit 0; done`),
		PTY:    &ptyrelay.PTY{Term: "xterm", Size: ptyrelay.Size{Cols: 80, Rows: 24}},
		Stdin:  inR,
		Stdout: &out,
	})
	defer inW.Close()
	for i := range 50 {
		require.NoError(t, s.Resize(ptyrelay.Size{Cols: uint32(80 + i), Rows: uint32(24 + i%10)}))
		_, err := fmt.Fprintf(inW, "%d\n", i)
		require.NoError(t, err)
	}
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code)
	for i := range 50 {
		assert.Contains(t, out.String(), fmt.Sprintf("got %d\r\n", i))
	}
}

func TestResizeIsClampedAndZeroAccepted(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	inR, inW := io.Pipe()
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "0", `stty size; read x; stty size`),
		PTY:   &ptyrelay.PTY{Term: "xterm", Size: ptyrelay.Size{}},
		Stdin: inR, Stdout: &out,
	})
	defer inW.Close()
	out.WaitFor(t, "0 0\r\n")
	require.NoError(t, s.Resize(ptyrelay.Size{Cols: 100000, Rows: 100000}))
	fmt.Fprintln(inW, "go")
	waitExit(t, s)
	assert.Contains(t, out.String(), fmt.Sprintf("%d %d\r\n", ptyrelay.MaxRows, ptyrelay.MaxCols))
}

func TestTerminalModesApplied(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	modes := []byte{
		3, 0, 0, 0, 8, // VERASE = ^H
		53, 0, 0, 0, 0, // ECHO off
		42, 0, 0, 0, 1, // IUTF8 on
		0,
	}
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "0", `stty -a`),
		PTY:    &ptyrelay.PTY{Term: "xterm", Modes: modes},
		Stdout: &out,
	})
	waitExit(t, s)
	assert.Contains(t, out.String(), "erase = ^H")
	assert.Regexp(t, `(^|\s)-echo(\s|$)`, out.String())
	assert.Regexp(t, `(^|\s)iutf8(\s|$)`, out.String())
}

func TestOutputStreamsAndSurvivesKill(t *testing.T) {
	for _, withPTY := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", withPTY), func(t *testing.T) {
			sb := sandboxtest.Start(t, bwrap.Config{})
			var out sandboxtest.Buffer
			cfg := ptyrelay.Config{
				Target: sb.Target,
				// 200 KB before the deadline: more than any pipe or pty buffer.
				Spec:   sh(t, "0", `i=0; while [ $i -lt 2000 ]; do printf '%099d\n' $i; i=$((i+1)); done; echo last-line; sleep 100`),
				Stdout: &out,
			}
			if withPTY {
				cfg.PTY = &ptyrelay.PTY{Term: "dumb"}
			}
			s := start(t, cfg)
			// Streams while running: the line arrives before any exit.
			out.WaitFor(t, "last-line")
			select {
			case <-s.Done():
				t.Fatal("session ended before the kill")
			default:
			}
			s.Kill()
			exit := waitExit(t, s)
			assert.Equal(t, syscall.SIGKILL, exit.Signal)
			assert.Equal(t, "KILL", exit.SignalName())
			assert.Equal(t, 2000, strings.Count(out.String(), "\n")-1)
			assert.Contains(t, out.String(), "last-line")
		})
	}
}

func TestStdinEOFReachesThePipe(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "0", "wc -c; cat"),
		Stdin:  strings.NewReader(strings.Repeat("x", 100000)),
		Stdout: &out,
	})
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code)
	assert.Equal(t, "100000\n", out.String())
}

// The end of a control exec's piped stdin is typed as the terminal's ^D,
// twice after an unfinished line, so that cat reads end of input and exits.
// Whether a trailing CR finished the line is the terminal's to say: with
// ICRNL off it does not, and one ^D would only hand "a\r" over and leave
// cat waiting.
func TestEndOfInputReachesATerminalsReader(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		modes       []byte
	}{
		{"unfinished line", "abc", nil},
		{"whole line", "abc\n", nil},
		{"CR with icrnl", "abc\r", nil},
		{"CR without icrnl", "abc\r", []byte{36, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := sandboxtest.Start(t, bwrap.Config{})
			var out sandboxtest.Buffer
			s := start(t, ptyrelay.Config{
				Target: sb.Target, Spec: spec(t, "0", "cat"),
				PTY:    &ptyrelay.PTY{Term: "dumb", Modes: tc.modes, EndInputWithEOF: true},
				Stdin:  strings.NewReader(tc.input),
				Stdout: &out,
			})
			exit := waitExit(t, s)
			assert.Equal(t, 0, exit.Code)
			assert.Equal(t, 2, strings.Count(out.String(), "abc"), "the echo and cat's copy: %q", out.String())
		})
	}
}

func TestSetupFailuresCarryTheReason(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	_, err := ptyrelay.Start(ptyrelay.Config{Target: sb.Target, Spec: spec(t, "0", "no-such-program"), Stdout: &out})
	var se *join.SetupError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 127, se.Code)
	assert.Contains(t, se.Msg, "no-such-program")

	sp := sh(t, "0", "true")
	sp.Dir = "/no/such/dir"
	_, err = ptyrelay.Start(ptyrelay.Config{Target: sb.Target, Spec: sp, Stdout: &out, PTY: &ptyrelay.PTY{}})
	require.ErrorAs(t, err, &se)
	assert.Contains(t, se.Msg, "/no/such/dir")
}

func TestExitCodesAndSignals(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	for _, tc := range []struct {
		script string
		code   int
		sig    string
	}{
		{"exit 0", 0, ""}, {"exit 1", 1, ""}, {"exit 7", 7, ""},
		{"kill -TERM $$", 128 + 15, "TERM"}, {"kill -SEGV $$", 128 + 11, "SEGV"},
	} {
		var out sandboxtest.Buffer
		s := start(t, ptyrelay.Config{Target: sb.Target, Spec: sh(t, "0", tc.script), Stdout: &out})
		exit := waitExit(t, s)
		assert.Equal(t, tc.code, exit.Code, tc.script)
		assert.Equal(t, tc.sig, exit.SignalName(), tc.script)
	}
}

func TestSignalGoesToTheSessionGroup(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	s := start(t, ptyrelay.Config{
		Target: sb.Target, Spec: sh(t, "1000", `trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`),
		Stdout: &out,
	})
	out.WaitFor(t, "ready")
	require.NoError(t, s.Signal(syscall.SIGTERM))
	exit := waitExit(t, s)
	assert.Equal(t, 3, exit.Code)
	assert.Contains(t, out.String(), "got-term")
}

func TestKillTakesTheWholeTree(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	s := start(t, ptyrelay.Config{
		Target: sb.Target,
		Spec:   sh(t, "0", `sleep 1000 & echo $!; setsid sleep 1001 & echo $!; sh -c 'sleep 1002 & echo $!; wait' & sleep 1; echo ready; wait`),
		Stdout: &out,
	})
	out.WaitFor(t, "ready")
	before := sandboxtest.ProcsOf("sleep 100")
	require.Len(t, before, 3, "three sleepers inside the sandbox")
	s.Kill()
	waitExit(t, s)
	require.Eventually(t, func() bool { return len(sandboxtest.ProcsOf("sleep 100")) == 0 }, 5*time.Second, 10*time.Millisecond,
		"children outlived the killed leader: %v", sandboxtest.ProcsOf("sleep 100"))
}

// TestBackgroundChildOutlivesItsSession pins that a session ends at its
// leader's exit even while a background child holds stdout, and that the
// child keeps running (and writing) afterwards
// (docs/failures.md#background-processes-outlive-their-command).
func TestBackgroundChildOutlivesItsSession(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	dir := t.TempDir()
	var left ptyrelay.Leftovers
	defer left.Close()
	var out sandboxtest.Buffer
	sp := sh(t, "0", `(sleep 0.3; i=0; while [ $i -lt 10 ]; do echo bg$i; i=$((i+1)); sleep 0.2; done; touch done) & echo fg`)
	sp.Dir = dir
	begin := time.Now()
	s := start(t, ptyrelay.Config{Target: sb.Target, Spec: sp, Stdout: &out, Leftovers: &left})
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code)
	assert.Less(t, time.Since(begin), time.Second, "the session waited for its background child")
	assert.Contains(t, out.String(), "fg\n")
	assert.Equal(t, 1, left.Len(), "stdout, still held by the child, is drained after the session")
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "done"))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "the background child died with its session (SIGPIPE?)")
	require.Eventually(t, func() bool { return left.Len() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A session whose output pipes were read to their end hands nothing to
// Leftovers: no process can write to them any more.
func TestPipesReadToTheirEndAreNotLeftOver(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var left ptyrelay.Leftovers
	defer left.Close()
	for range 5 {
		var out, errb sandboxtest.Buffer
		s := start(t, ptyrelay.Config{Target: sb.Target, Spec: sh(t, "0", "echo out; echo err >&2"), Stdout: &out, Stderr: &errb, Leftovers: &left})
		exit := waitExit(t, s)
		require.Equal(t, 0, exit.Code)
		assert.Equal(t, "out\n", out.String())
		assert.Equal(t, 0, left.Len(), "pipes read to their end were handed to Leftovers")
	}
}

// TestOrphansNeverReachTheDaemon pins what makes the daemon's PID-1
// reaper safe: a session's command is reaped by its own join.Cmd, and
// whatever a session orphans is re-parented inside the sandbox, to its pid 1,
// never to the daemon. So a reaper that only reaps processes it did not
// start (a separate init process, or one that skips known children) can
// never take a session's status
// (docs/failures.md#reaper-never-takes-a-session-exit-status).
func TestOrphansNeverReachTheDaemon(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	// Make the test process the subreaper a container's PID 1 would be.
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	var out sandboxtest.Buffer
	s := start(t, ptyrelay.Config{
		Target: sb.Target,
		Spec:   sh(t, "0", `(sh -c 'sleep 1003' &) ; (setsid sleep 1004 &); sleep 0.2; exit 9`),
		Stdout: &out,
	})
	exit := waitExit(t, s)
	assert.Equal(t, 9, exit.Code)
	sandboxNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", sb.Holder.PID))
	require.NoError(t, err)
	orphans := append(sandboxtest.ProcsOf("sleep 1003"), sandboxtest.ProcsOf("sleep 1004")...)
	require.Len(t, orphans, 2)
	for _, pid := range orphans {
		ppid := parentOf(t, pid)
		assert.NotEqual(t, os.Getpid(), ppid, "an orphan of a session was re-parented to the daemon")
		parentNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", ppid))
		require.NoError(t, err)
		assert.Equal(t, sandboxNS, parentNS, "orphans are re-parented inside the sandbox")
		unix.Kill(pid, unix.SIGKILL)
	}
}

func parentOf(t *testing.T, pid int) int {
	st, err := procfs.ReadStat(pid)
	require.NoError(t, err)
	return st.PPID
}

// slowWriter accepts a little at a time, as a client with a small window.
type slowWriter struct {
	n     int
	gate  chan struct{}
	total int64
	mu    sync.Mutex
}

func (w *slowWriter) Write(p []byte) (int, error) {
	<-w.gate
	w.mu.Lock()
	w.total += int64(len(p))
	w.mu.Unlock()
	return len(p), nil
}

func TestBackpressureStallsTheCommand(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	w := &slowWriter{gate: make(chan struct{})}
	s := start(t, ptyrelay.Config{Target: sb.Target, Spec: sh(t, "0", `head -c 50000000 /dev/zero`), Stdout: w})
	time.Sleep(300 * time.Millisecond)
	select {
	case <-s.Done():
		t.Fatal("the command finished although nothing was read: output was buffered")
	default:
	}
	close(w.gate)
	exit := waitExit(t, s)
	assert.Equal(t, 0, exit.Code)
	assert.Equal(t, int64(50000000), w.total)
}

var errGone = errors.New("client gone")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errGone }

func TestVanishedReaderDoesNotBlockTheCommand(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	s := start(t, ptyrelay.Config{Target: sb.Target, Spec: sh(t, "0", `head -c 10000000 /dev/zero; exit 4`), Stdout: failingWriter{}})
	exit := waitExit(t, s)
	assert.Equal(t, 4, exit.Code)
	assert.ErrorIs(t, s.OutputError(), errGone)
}

func TestLoginShellPath(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	var out sandboxtest.Buffer
	sp := spec(t, "0", "-sh", "-c", `echo "$0"`)
	sp.Path = "/bin/sh"
	s := start(t, ptyrelay.Config{Target: sb.Target, Spec: sp, Stdout: &out})
	waitExit(t, s)
	assert.Equal(t, "-sh\n", out.String())
}

// Sessions one after another take their relay buffers from the pool rather
// than fresh memory (docs/failures.md#a-session-reuses-its-relay-buffers).
func TestSessionsReuseTheirRelayBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers on purpose")
	}
	sb := sandboxtest.Start(t, bwrap.Config{})
	run := func() {
		var out, errb sandboxtest.Buffer
		s := start(t, ptyrelay.Config{
			Target: sb.Target,
			Spec:   sh(t, "0", "cat; echo out; echo err >&2"),
			Stdin:  strings.NewReader("in\n"),
			Stdout: &out,
			Stderr: &errb,
		})
		exit := waitExit(t, s)
		require.Equal(t, 0, exit.Code)
		require.Equal(t, "in\nout\n", out.String())
		require.Equal(t, "err\n", errb.String())
	}
	for range 5 {
		run()
	}
	const sessions = 30
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range sessions {
		run()
	}
	runtime.ReadMemStats(&after)
	perSession := (after.TotalAlloc - before.TotalAlloc) / sessions
	t.Logf("%d bytes allocated per session", perSession)
	// Fresh buffers made it about 200 KiB (three buffers of 160 KiB in
	// all); what else a session allocates here is about 36 KiB.
	assert.Less(t, perSession, uint64(96<<10), "bytes allocated per session")
}
