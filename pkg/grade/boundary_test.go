package grade_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// The grading boundary against a root agent that races the grader: every
// test here runs the attack as the agent would, from a session in the
// sandbox that keeps running through grading.

// racer is a root agent's helper: it watches directories with inotify and,
// for as long as it runs, swaps whatever grading might make or use there.
// Its verbs:
//
//	watch DIR... -- react to every entry created in DIR: rename it aside and
//	                put a symlink to DECOY in its place (the race on /tests)
//	exchange A B  -- swap A and B with renameat2(RENAME_EXCHANGE) in a loop
//
// It stops when the file named by STOP exists.
const racer = `
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE, SYS_renameat2 = -100, 2, 316
def exchange(a, b):
    return libc.syscall(SYS_renameat2, AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE)
stop, decoy, verb, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
hits = 0
if verb == "watch":
    fd = libc.inotify_init1(os.O_NONBLOCK)
    wds = {libc.inotify_add_watch(fd, d.encode(), 0x100 | 0x80): d for d in args}  # IN_CREATE|IN_MOVED_TO
    while not os.path.exists(stop):
        try:
            buf = os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.001); continue
        i = 0
        while i < len(buf):
            wd, mask, cookie, n = struct.unpack_from("iIII", buf, i)
            name = buf[i+16:i+16+n].rstrip(b"\0").decode()
            i += 16 + n
            p = os.path.join(wds[wd], name)
            if name.endswith(".aside") or os.path.islink(p):
                continue
            try:
                os.rename(p, p + ".aside"); os.symlink(decoy, p); hits += 1
            except OSError:
                pass
else:
    a, b = args
    while not os.path.exists(stop):
        if exchange(a, b) == 0:
            hits += 1
print("hits", hits)
`

// startRacer runs the racer as the sandbox's root in the background and
// returns a function that stops it.
func startRacer(t *testing.T, w *world, decoy string, args ...string) (stop func()) {
	t.Helper()
	dir := sharedDir(t)
	script := filepath.Join(dir, "racer.py")
	require.NoError(t, os.WriteFile(script, []byte(racer), 0o644))
	stopFile := filepath.Join(dir, "stop")
	cmd := fmt.Sprintf("nohup python3 %s %s %s %s > %s/out 2>&1 &", script, stopFile, decoy, strings.Join(args, " "), dir)
	r := w.sb.Sh(t, "0", cmd)
	require.Equal(t, 0, r.Code, r.Stderr)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		os.WriteFile(stopFile, nil, 0o644)
		for range 100 {
			if b, _ := os.ReadFile(filepath.Join(dir, "out")); strings.Contains(string(b), "hits") {
				t.Logf("racer: %s", strings.TrimSpace(string(b)))
				return
			}
			w.sb.Sh(t, "0", "sleep 0.05")
		}
	}
	t.Cleanup(stop)
	return stop
}

// decoyTests is a tests directory the agent made: its test.sh forges a
// reward of 1.
func decoyTests(t *testing.T) (dir, ran string) {
	dir = sharedDir(t)
	ran = filepath.Join(dir, "ran")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test.sh"), []byte("#!/bin/sh\ntouch "+ran+"\necho 1 > /logs/verifier/reward.txt\n"), 0o755))
	return dir, ran
}

// An agent that watches / with inotify and replaces any /tests the grader
// makes with a symlink to its own tests, and one that keeps exchanging a
// /tests of its own with its decoy, forge nothing: /tests is never made in
// the shared filesystem, and the verifier's /tests is the task's.
func TestRacingAgentCannotRedirectTheTests(t *testing.T) {
	for _, attack := range []struct {
		name  string
		setup func(t *testing.T, w *world, decoy string) func()
	}{
		{"inotify on / swaps a new /tests for a symlink", func(t *testing.T, w *world, decoy string) func() {
			return startRacer(t, w, decoy, "watch", "/")
		}},
		{"RENAME_EXCHANGE of an agent's /tests with its decoy", func(t *testing.T, w *world, decoy string) func() {
			require.NoError(t, os.Mkdir("/tests", 0o755))
			t.Cleanup(func() { os.RemoveAll("/tests") })
			return startRacer(t, w, decoy, "exchange", "/tests", decoy)
		}},
	} {
		t.Run(attack.name, func(t *testing.T) {
			testsLeftAsFound(t)
			t.Cleanup(func() {
				// Whatever the racer made, should grading ever make a /tests.
				if fi, err := os.Lstat("/tests"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
					os.Remove("/tests")
				}
				os.RemoveAll("/tests.aside")
			})
			w := newWorld(t)
			decoy, ran := decoyTests(t)
			stop := attack.setup(t, w, decoy)
			tests := w.tests(t, "#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n", nil)
			for i := range 5 {
				v := w.grade(t, w.config(t, tests))
				require.Equal(t, grade.StatusGraded, v.Status, "round %d: %s %s", i, v.Message, v.StdoutTail)
				assert.Equal(t, map[string]float64{"reward": 0}, v.Reward, "round %d: the agent's test.sh decided the reward", i)
			}
			stop()
			_, err := os.Stat(ran)
			assert.True(t, os.IsNotExist(err), "the agent's test.sh ran as the verifier")
			for _, p := range []string{"/tests.aside"} {
				_, err := os.Lstat(p)
				assert.True(t, os.IsNotExist(err), "grading made %s in the shared filesystem", p)
			}
		})
	}
}

// A /tests that points at a mount of the sandbox's view (the read-only
// /proc/sys, the tmpfs that hides the harness dir, the /logs/verifier mask)
// leaves that mount in place: grading mounts and unmounts nothing in the
// sandbox's namespace, so it has nothing to detach.
func TestTestsSymlinkToASandboxMountDetachesNothing(t *testing.T) {
	w := newWorld(t)
	tests := w.tests(t, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", nil)
	for _, target := range []string{"/proc/sys", filepath.Dir(w.harness), "/logs/verifier"} {
		t.Run(target, func(t *testing.T) {
			require.NoError(t, os.Symlink(target, "/tests"))
			t.Cleanup(func() { os.Remove("/tests") })
			before := w.sb.Sh(t, "0", "grep -c . /proc/self/mountinfo").Stdout
			v := w.grade(t, w.config(t, tests))
			require.Equal(t, grade.StatusGraded, v.Status, v.Message)
			assert.Equal(t, before, w.sb.Sh(t, "0", "grep -c . /proc/self/mountinfo").Stdout, "grading changed the sandbox's mounts")
			// The attack's payoffs, each of which must still be refused.
			r := w.sb.Sh(t, "0", "echo attacked > /proc/sys/kernel/hostname")
			assert.NotEqual(t, 0, r.Code, "/proc/sys is writable after grading")
			r = w.sb.Sh(t, "0", "ls -A "+w.harness)
			assert.NotEqual(t, 0, r.Code, "the harness dir is visible after grading: %s", r.Stdout)
			r = w.sb.Sh(t, "0", "ls -A /logs/verifier")
			assert.Equal(t, "", r.Stdout, "the verdict is visible after grading")
			require.NoError(t, os.Remove("/tests"))
		})
	}
}

// An agent that renames /logs once grading has started and makes a
// /logs/verifier of its own gets neither the reward nor the files the
// verifier writes beside it, and cannot turn the verdict into no_reward.
func TestLogsMovedDuringGradingChangesNothing(t *testing.T) {
	w := newWorld(t)
	sync := sharedDir(t)
	t.Cleanup(func() {
		if _, err := os.Lstat("/logs.moved"); err == nil {
			os.RemoveAll("/logs")
			os.Rename("/logs.moved", "/logs")
		}
	})
	printed := agentDuringGrading(t, w, sync, `mv /logs /logs.moved && echo renamed; mkdir -p /logs/verifier && echo made`)
	tests := w.tests(t, "#!/bin/sh\n"+verifierLetsAgentAct(sync)+`sleep 0.3
echo '{"expected": "the answer"}' > /logs/verifier/details.json
echo 1 > /logs/verifier/reward.txt
`, nil)
	v := w.grade(t, w.config(t, tests))
	b := printed()
	require.Contains(t, b, "renamed", "the attack did not run")
	require.Equal(t, grade.StatusGraded, v.Status, "%s %s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)
	for _, name := range []string{"reward.txt", "details.json"} {
		_, err := os.Lstat(filepath.Join("/logs/verifier", name))
		assert.True(t, os.IsNotExist(err), "the verifier wrote %s into the agent's /logs/verifier", name)
	}
	_, err := os.Stat(filepath.Join(w.logs, "details.json"))
	assert.NoError(t, err, "the verdict files were not copied out")
}

// The verifier's pid namespace is its own: it sees no process of the
// substrate (the daemon, the harness) and none of the agent's, so nothing it
// runs can signal the grader. It is pid 2 under the visitor, and whatever it
// leaves behind ends with the grading.
func TestVerifierSeesOnlyItsOwnProcesses(t *testing.T) {
	w := newWorld(t)
	r := w.sb.Run(t, "0", nil, "/bin/sh", "-c", "nohup sleep 1234 >/dev/null 2>&1 &")
	require.Equal(t, 0, r.Code, r.Stderr)
	out := sharedDir(t)
	tests := w.tests(t, fmt.Sprintf(`#!/bin/sh
for p in /proc/[0-9]*; do echo "$(basename $p) $(tr '\0' ' ' < $p/cmdline)"; done > %[1]s/ps
readlink /proc/self/ns/pid > %[1]s/pidns
nohup sleep 4321 >/dev/null 2>&1 &
echo 1 > /logs/verifier/reward.txt
`, out), nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, "%s %s", v.Message, v.StdoutTail)
	b, err := os.ReadFile(filepath.Join(out, "ps"))
	require.NoError(t, err)
	ps := string(b)
	t.Logf("the verifier's processes:\n%s", ps)
	assert.NotContains(t, ps, filepath.Base(os.Args[0]), "the verifier sees the daemon")
	assert.NotContains(t, ps, "sleep 1234", "the verifier sees the agent's processes")
	ns, err := os.ReadFile(filepath.Join(out, "pidns"))
	require.NoError(t, err)
	own, err := os.Readlink("/proc/self/ns/pid")
	require.NoError(t, err)
	assert.NotEqual(t, own, strings.TrimSpace(string(ns)), "the verifier shares the daemon's pid namespace")
	assert.Contains(t, ps, "1 sandboxd-visitor", "pid 1 is the visitor")
	assert.LessOrEqual(t, strings.Count(ps, "\n"), 4, "more processes than the visitor and the verifier's own")
	// What the verifier left behind ended with grading.
	r = w.sb.Sh(t, "0", "pgrep -f '[s]leep 4321'")
	assert.NotEqual(t, 0, r.Code)
	assert.Empty(t, pgrepSubstrate(t, "sleep 4321"), "the verifier's leftover outlived grading")
}

// pgrepSubstrate lists the substrate's pids whose command line contains s.
func pgrepSubstrate(t *testing.T, s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// Every directory on the way to a hidden directory is a mount point in the
// sandbox's view, so a root agent can neither rename nor replace one: the
// daemon's paths into the harness dir keep meaning what they meant at start.
func TestAgentCannotMoveTheWayToTheHarness(t *testing.T) {
	sandboxtest.RequireRoot(t)
	top := t.TempDir()
	harness := filepath.Join(top, "deep", "harness")
	require.NoError(t, os.MkdirAll(harness, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(harness, masks.HarnessMarker), nil, 0o600))
	sb := sandboxtest.Start(t, bwrap.Config{Hide: []string{harness}})
	scratch := filepath.Join(t.TempDir(), "x")
	for _, dir := range []string{filepath.Dir(top), top, filepath.Dir(harness)} {
		t.Cleanup(func() { os.Rename(dir+".moved", dir) })
		r := sb.Sh(t, "0", fmt.Sprintf("mv %[1]s %[1]s.moved || { mkdir -p %[2]s && mv -T %[2]s %[1]s; }", dir, scratch))
		assert.NotEqual(t, 0, r.Code, "the agent moved %s: %s", dir, r.Stdout)
		assert.Contains(t, r.Stderr, "busy", dir)
		_, err := os.Stat(dir)
		assert.NoError(t, err)
	}
}

// The verifier's /dev is its own, as the sandbox's is: the usual devices, a
// devpts instance of its own, no disk and no pty of the substrate's (a
// `docker exec -it` session's, on a bare host the operator's). It shares
// the sandbox's hostname and IPC namespaces, and gets no descriptor of the
// daemon's but its output.
func TestVerifierDevIsItsOwn(t *testing.T) {
	w := newWorld(t)
	out := sharedDir(t)
	// A pty of the substrate's, open while the verifier runs.
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	require.NoError(t, err)
	defer ptmx.Close()
	tests := w.tests(t, fmt.Sprintf(`#!/bin/sh
ls -A /dev | tr '\n' ' ' > %[1]s/dev
ls -A /dev/pts | tr '\n' ' ' > %[1]s/pts
ls /proc/self/fd | tr '\n' ' ' > %[1]s/fds
readlink /proc/self/ns/ipc /proc/self/ns/uts > %[1]s/ns
echo x > /dev/null && head -c 4 /dev/urandom | wc -c > %[1]s/urandom
echo 1 > /logs/verifier/reward.txt
`, out), nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, "%s %s", v.Message, v.StdoutTail)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	dev := strings.Fields(read("dev"))
	for _, want := range []string{"null", "zero", "full", "random", "urandom", "tty", "pts", "shm", "ptmx", "fd"} {
		assert.Contains(t, dev, want)
	}
	for _, name := range dev {
		assert.NotRegexp(t, `^(sd|vd|nvme|xvd|loop|mem|kmem|port)`, name, "the verifier sees the substrate's /dev")
	}
	assert.Equal(t, "ptmx", read("pts"), "the verifier sees the substrate's ptys")
	assert.Equal(t, "4", read("urandom"))
	// 0, 1, 2 and the one ls opens.
	assert.LessOrEqual(t, len(strings.Fields(read("fds"))), 4, "descriptors of the daemon reached the verifier: %s", read("fds"))
	want := w.sb.Sh(t, "0", "readlink /proc/self/ns/ipc /proc/self/ns/uts").Stdout
	assert.Equal(t, strings.TrimSpace(want), read("ns"), "the verifier does not share the sandbox's IPC and hostname")
}

// The verifier can send the visitor, its pid 1, the signals that would end a
// Go program (the agent's code runs as the verifier): grading goes on, and
// a verifier that stops itself is never reported as sandboxd's failure.
func TestVerifierCannotEndTheVisitorWithSignals(t *testing.T) {
	w := newWorld(t)
	tests := w.tests(t, "#!/bin/sh\nfor s in TERM INT HUP QUIT USR1 PIPE; do kill -s $s 1; done\nsleep 0.2\necho 1 > /logs/verifier/reward.txt\n", nil)
	v, err := grade.Run(context.Background(), w.config(t, tests))
	require.NoError(t, err, "the verifier's signals ended grading as sandboxd's failure: %+v", v)
	assert.Equal(t, grade.StatusGraded, v.Status, "%s %s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)
}

// A directory deeper below a rebuilt parent (here top/a/b, below top, which
// is rebuilt to hide top/h1) is pinned too, after that parent is rebuilt:
// otherwise the agent could rename it and make a decoy where the daemon
// and the visitors look for the hidden top/a/b/tasks/x.
func TestAgentCannotMoveTheWayBelowARebuiltParent(t *testing.T) {
	sandboxtest.RequireRoot(t)
	top, err := os.MkdirTemp("/tmp", "sandboxd-pins-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(top) })
	require.NoError(t, os.Chmod(top, 0o755))
	h1 := filepath.Join(top, "h1")
	x := filepath.Join(top, "a", "b", "tasks", "x")
	for _, d := range []string{h1, x} {
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, masks.HarnessMarker), nil, 0o600))
	}
	sb := sandboxtest.Start(t, bwrap.Config{Hide: []string{h1, x}})
	for _, dir := range []string{filepath.Join(top, "a", "b"), filepath.Join(top, "a", "b", "tasks")} {
		t.Cleanup(func() { os.Rename(dir+".moved", dir) })
		r := sb.Sh(t, "0", fmt.Sprintf("mv %[1]s %[1]s.moved", dir))
		assert.NotEqual(t, 0, r.Code, "the agent moved %s", dir)
		assert.Contains(t, r.Stderr, "busy", dir)
	}
	r := sb.Sh(t, "0", "ls -A "+x)
	assert.NotEqual(t, 0, r.Code, "the hidden directory is visible: %s", r.Stdout)
}

// A process the verifier orphans and that then exits is gone, not a zombie
// of the visitor's that still answers kill -0: a test.sh that waits for a
// daemon of its own to end sees it end.
func TestVerifierOrphansAreReapedWhileItRuns(t *testing.T) {
	w := newWorld(t)
	tests := w.tests(t, `#!/bin/sh
pid=$(sh -c 'sleep 0.3 >/dev/null 2>&1 & echo $!')
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
if [ $i -lt 50 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
`, nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, "%s %s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, "the orphan stayed a zombie")
}
