package grade_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// alive says whether pid is still a live process (not a zombie) running
// cmd a moment later: a killed process takes a little while to go.
func alive(pid int, cmd string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(b) == 0 || !strings.Contains(string(b), cmd) {
			return false
		}
	}
	return true
}

func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err)
		out = append(out, n)
	}
	require.NotEmpty(t, out)
	return out
}

// sharedDir is a directory in the shared filesystem that both the agent and
// the verifier can write, for tests that coordinate them.
// agentDuringGrading starts script as the sandbox's root in the background:
// it waits for the verifier to announce grading (see verifierLetsAgentAct),
// writes what it prints to <sync>/agent and says when it is done. It
// returns what the agent printed, once grading is over.
func agentDuringGrading(t *testing.T, w *world, sync, script string) (printed func() string) {
	t.Helper()
	agent := `while [ ! -e ` + sync + `/grading ]; do sleep 0.01; done
{ ` + script + `
} > ` + sync + `/agent 2>&1
touch ` + sync + `/agent-done`
	r := w.sb.Run(t, "0", nil, "/bin/sh", "-c", "nohup /bin/sh -c \"$1\" >/dev/null 2>&1 &", "sh", agent)
	require.Equal(t, 0, r.Code, r.Stderr)
	return func() string {
		b, err := os.ReadFile(filepath.Join(sync, "agent"))
		require.NoError(t, err, "the agent session did not run during grading")
		t.Logf("agent: %s", b)
		return string(b)
	}
}

// verifierLetsAgentAct is the verifier's side of agentDuringGrading: it
// announces grading and waits (10 s at most) until the agent is done.
func verifierLetsAgentAct(sync string) string {
	return `touch ` + sync + `/grading
i=0; while [ ! -e ` + sync + `/agent-done ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
`
}

func sharedDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	return dir
}

// Symlinks planted in the tests, in the verdict directory and in the logs
// directory redirect no chown and no write
// (docs/failures.md#grading-never-follows-symlinks).
func TestChownDoesNotFollowPlantedSymlinks(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	victimDir := t.TempDir()
	victim := filepath.Join(victimDir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("root's\n"), 0o600))

	// A symlink in the tests, one the verifier plants in its verdict
	// directory, and one waiting in the logs dir.
	tests := w.tests(t, `#!/bin/sh
set -e
[ -L /tests/link ]
[ "$(stat -c %u:%g /tests/link)" = 1000:1000 ]
[ "$(stat -c %u:%g /tests/test.sh)" = 1000:1000 ]
[ "$(stat -c %u:%g /tests)" = 1000:1000 ]
[ "$(stat -c %u:%g /logs/verifier)" = 1000:1000 ]
[ "$(stat -c %u:%g /logs/verifier/test-stdout.txt)" = 1000:1000 ]
ln -s `+victim+` /logs/verifier/planted
echo 0 > /logs/verifier/reward.txt
`, nil)
	require.NoError(t, os.Symlink(victim, filepath.Join(tests, "link")))
	require.NoError(t, os.Symlink(victim, filepath.Join(w.logs, "reward.txt")))

	cfg := w.config(t, tests)
	u, err := idmap.Lookup("/", "1000:1000")
	require.NoError(t, err)
	cfg.User, cfg.Workdir = u, "/"
	v := w.grade(t, cfg)
	require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 0}, v.Reward)

	var st unix.Stat_t
	require.NoError(t, unix.Stat(victim, &st))
	assert.Equal(t, uint32(0), st.Uid, "the symlink's target was chowned")
	assert.Equal(t, uint32(0o600), st.Mode&0o7777)
	b, _ := os.ReadFile(victim)
	assert.Equal(t, "root's\n", string(b), "the symlink in the logs dir was written through")
	fi, err := os.Lstat(filepath.Join(w.logs, "reward.txt"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the planted symlink in the logs dir is replaced by the file")
	_, err = os.Lstat(filepath.Join(w.logs, "planted"))
	assert.True(t, os.IsNotExist(err), "a symlink the verifier planted is not copied out")
}

// Background children that keep test.sh's stdout open do not hold up
// grading (docs/failures.md#verifier-ends-when-its-leader-exits).
func TestBackgroundChildHoldingStdoutDoesNotHangGrading(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	tests := w.tests(t, "#!/bin/bash\nsleep 300 &\nnohup sleep 301 &\necho started children\necho 1 > /logs/verifier/reward.txt\n", nil)
	start := time.Now()
	v := w.grade(t, w.config(t, tests))
	assert.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Less(t, time.Since(start), 30*time.Second, "grading waited for the background children")
	assert.Contains(t, v.StdoutTail, "started children")
}

// A verifier past its timeout is verifier_timeout with no reward, never 0.0;
// its whole tree is killed and what it printed is kept
// (docs/failures.md#timeout-or-missing-reward-is-never-a-zero).
func TestVerifierTimeoutIsAnErrorNotZero(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	shared := sharedDir(t)
	pids := filepath.Join(shared, "pids")
	tests := w.tests(t, `#!/bin/bash
echo printed before the deadline
echo 0 > /logs/verifier/reward.txt
sleep 300 & echo $! >> `+pids+`
setsid sleep 301 </dev/null >/dev/null 2>&1 & echo $! >> `+pids+`
echo $$ >> `+pids+`
sleep 302
`, nil)
	cfg := w.config(t, tests)
	cfg.Timeout = 2 * time.Second
	start := time.Now()
	v, err := grade.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, grade.StatusTimeout, v.Status)
	assert.Equal(t, grade.ExitTimeout, v.Status.ExitCode())
	assert.NotEqual(t, 0, v.Status.ExitCode())
	assert.Nil(t, v.Reward, "a timed-out verifier has no reward, not 0.0")
	assert.Equal(t, -1, v.ExitCode)
	assert.Contains(t, v.StdoutTail, "printed before the deadline")
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.InDelta(t, 2, v.DurationSec, 3)
	for _, pid := range readPIDs(t, pids) {
		assert.False(t, alive(pid, "sleep"), "process %d of the timed-out verifier survived", pid)
	}
	b, err := os.ReadFile(filepath.Join(w.logs, "test-stdout.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "printed before the deadline", "output before the deadline is kept")
}

// A verifier that leaves no reward, or an empty one, is no_reward, never 0.0
// (docs/failures.md#timeout-or-missing-reward-is-never-a-zero).
func TestNoRewardIsAnErrorNotZero(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	v := w.grade(t, w.config(t, w.tests(t, "#!/bin/sh\necho nothing to say\n", nil)))
	assert.Equal(t, grade.StatusNoReward, v.Status)
	assert.Equal(t, grade.ExitNoReward, v.Status.ExitCode())
	assert.Nil(t, v.Reward)
	assert.Equal(t, 0, v.ExitCode)
	assert.Contains(t, v.Message, "reward.txt")

	v = w.grade(t, w.config(t, w.tests(t, "#!/bin/sh\n: > /logs/verifier/reward.txt\n", nil)))
	assert.Equal(t, grade.StatusNoReward, v.Status, "an empty reward file is no reward")
	assert.Contains(t, v.Message, "empty")
}

// startAgentServer starts a line server as an agent session would (nohup …
// &), inside the sandbox's network, and waits until it answers.
func startAgentServer(t *testing.T, w *world, port int) {
	t.Helper()
	server := fmt.Sprintf(`import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", %d)); s.listen(16)
while True:
    c, _ = s.accept()
    f = c.makefile("rw")
    line = f.readline().strip()
    f.write("PONG " + line + "\n"); f.flush(); c.close()
`, port)
	r := w.sb.Run(t, "0", nil, "/bin/sh", "-c", "nohup /usr/bin/python3 -c \"$1\" agent-server >/dev/null 2>&1 & for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', $2))\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1", "sh", server, strconv.Itoa(port))
	require.Equal(t, 0, r.Code, "agent server did not come up: %s", r.Stderr)
}

// askAgentServer is a verifier fragment: exit 1 unless the server answers.
func askAgentServer(port int) string {
	return fmt.Sprintf(`/usr/bin/python3 - <<'EOF' || exit 1
import socket
c = socket.create_connection(("127.0.0.1", %d), timeout=5)
c.sendall(b"ping\n")
assert c.makefile().readline() == "PONG ping\n"
EOF
`, port)
}

// The agent's server answers the verifier, and grading kills nothing of the
// agent's (docs/failures.md#verifier-sees-agent-servers).
func TestAgentProcessesStayAliveDuringGrading(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	startAgentServer(t, w, 6665)
	// The verifier reaches the agent's server over the sandbox's network;
	// it does not see the agent's processes (its pid namespace is its own,
	// see TestVerifierSeesOnlyItsOwnProcesses).
	tests := w.tests(t, "#!/bin/bash\n"+askAgentServer(6665)+
		"echo 1 > /logs/verifier/reward.txt\n", nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)
	// Grading killed nothing of the agent's.
	r := w.sb.Sh(t, "0", "pgrep -f agent-server")
	assert.Equal(t, 0, r.Code, "the agent's server died with grading")
}

// test.sh runs in the task's workdir, and a missing workdir is a verifier
// error (docs/failures.md#test-script-runs-in-the-workdir).
func TestTestShRunsInWorkdir(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	cfg := w.config(t, w.tests(t, `#!/bin/bash
# Terminal-Bench 2 style: refuse to run from /.
if [ "$PWD" = "/" ]; then echo "Error: No working directory set"; exit 1; fi
[ "$PWD" = "$WANT_WORKDIR" ] || { echo "wrong workdir $PWD"; exit 1; }
cat answer.txt | grep -q 42 && echo 1 > /logs/verifier/reward.txt
`, nil))
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Workdir, "answer.txt"), []byte("42\n"), 0o644))
	cfg.Env = append(cfg.Env, "WANT_WORKDIR="+cfg.Workdir)
	v := w.grade(t, cfg)
	require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)

	cfg.Workdir = filepath.Join(cfg.Workdir, "missing")
	v = w.grade(t, cfg)
	assert.Equal(t, grade.StatusError, v.Status)
	assert.Contains(t, v.Message, "missing")
}

// A no-network verifier keeps the full id map and the sandbox's loopback, and
// reaches nothing else
// (docs/failures.md#no-network-verifier-keeps-chown-and-loopback).
func TestNoNetworkVerifierCanChownAndReachLoopback(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	startAgentServer(t, w, 8000)
	tests := w.tests(t, `#!/bin/bash
set -e
mkdir d; echo x > d/f; chown 1000:1000 d/f
tar -cf a.tar d; rm -rf d; tar -xpf a.tar
[ "$(stat -c %u:%g d/f)" = 1000:1000 ]
`+askAgentServer(8000)+`
# Only loopback exists in the sandbox's network: nothing outside answers.
[ "$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')" = lo ]
if curl --noproxy '*' -s -m 3 -o /dev/null http://1.1.1.1/; then echo reached the outside; exit 1; fi
[ -z "${http_proxy:-}${https_proxy:-}" ]
echo 1 > /logs/verifier/reward.txt
`, nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward)
}

// Whatever test.sh leaves behind, however detached, ends with grading
// (docs/failures.md#verifier-children-end-with-it).
func TestVerifierLeftoverChildrenKilled(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	shared := sharedDir(t)
	pids := filepath.Join(shared, "pids")
	tests := w.tests(t, `#!/bin/bash
sleep 300 </dev/null >/dev/null 2>&1 & echo $! >> `+pids+`
setsid sleep 301 </dev/null >/dev/null 2>&1 & echo $! >> `+pids+`
( sleep 302 </dev/null >/dev/null 2>&1 & echo $! >> `+pids+` )
nohup setsid bash -c 'sleep 303 & echo $! >> `+pids+`; wait' </dev/null >/dev/null 2>&1 &
sleep 0.5
echo 1 > /logs/verifier/reward.txt
`, nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
	got := readPIDs(t, pids)
	assert.Len(t, got, 4)
	for _, pid := range got {
		assert.False(t, alive(pid, "sleep"), "the verifier's child %d outlived grading", pid)
	}
}

// A test.sh without the execute bit runs, as under Harbor, and the task's own
// copy is left as it was
// (docs/failures.md#non-executable-test-script-still-runs).
func TestNonExecutableTestShRuns(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	tests := w.tests(t, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", nil)
	require.NoError(t, os.Chmod(filepath.Join(tests, "test.sh"), 0o644))
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	fi, err := os.Stat(filepath.Join(tests, "test.sh"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "the task's own copy is not modified")
}

// The verifier's environment is exactly the one given, names that look
// internal included (docs/failures.md#verifier-environment-is-its-own).
func TestVerifierEnvIsExactlyWhatWasGiven(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	cfg := w.config(t, w.tests(t, "#!/bin/sh\ntr '\\0' '\\n' < /proc/$$/environ > /logs/verifier/env.txt\necho 1 > /logs/verifier/reward.txt\n", nil))
	cfg.Env = []string{"PATH=/usr/bin:/bin", "HOME=/root", "TASK_VAR=from verifier.env", "SANDBOXD_LOOKS_INTERNAL=kept", "http_proxy=http://t:x@127.0.0.1:3129"}
	v := w.grade(t, cfg)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	b, err := os.ReadFile(filepath.Join(w.logs, "env.txt"))
	require.NoError(t, err)
	assert.ElementsMatch(t, cfg.Env, strings.Split(strings.TrimSpace(string(b)), "\n"))
}

func TestRewardJSONWithSeveralMetrics(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	v := w.grade(t, w.config(t, w.tests(t, `#!/bin/sh
echo 0 > /logs/verifier/reward.txt
echo '{"reward": 1, "accuracy": 0.875, "latency_ms": -3e2}' > /logs/verifier/reward.json
`, nil)))
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 1, "accuracy": 0.875, "latency_ms": -300}, v.Reward, "reward.json wins over reward.txt")
}

func TestBadRewardsAreVerifierErrors(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{"nan", "reward.txt", "nan", "not a finite number"},
		{"inf", "reward.txt", "+Inf", "not a finite number"},
		{"garbage", "reward.txt", "PASSED", "not a number"},
		{"json nan", "reward.json", `{"reward": NaN}`, "NaN"},
		{"json huge", "reward.json", `{"reward": 1e999}`, "not a finite number"},
		{"json string", "reward.json", `{"reward": "1"}`, "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := w.grade(t, w.config(t, w.tests(t, fmt.Sprintf("#!/bin/sh\nprintf '%%s' '%s' > /logs/verifier/%s\n", tc.content, tc.file), nil)))
			assert.Equal(t, grade.StatusError, v.Status)
			assert.Equal(t, grade.ExitVerifierError, v.Status.ExitCode())
			assert.Nil(t, v.Reward)
			assert.Contains(t, v.Message, tc.file)
			assert.Contains(t, v.Message, tc.want)
		})
	}
	t.Run("symlink", func(t *testing.T) {
		v := w.grade(t, w.config(t, w.tests(t, "#!/bin/sh\necho 1 > /tmp/x-$$; ln -s /tmp/x-$$ /logs/verifier/reward.txt\n", nil)))
		assert.Equal(t, grade.StatusError, v.Status)
		assert.Contains(t, v.Message, "symlink")
	})
	t.Run("fifo", func(t *testing.T) {
		v := w.grade(t, w.config(t, w.tests(t, "#!/bin/sh\nmkfifo /logs/verifier/reward.txt\n", nil)))
		assert.Equal(t, grade.StatusError, v.Status)
		assert.Contains(t, v.Message, "not a regular file")
	})
}

// A symlink planted at /logs/verifier/reward.txt in the shared filesystem
// before grading is neither read nor written: the verifier's /logs/verifier
// is its own fresh directory.
func TestPlantedRewardInSharedLogsVerifierChangesNothing(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	forged := filepath.Join(t.TempDir(), "forged")
	require.NoError(t, os.WriteFile(forged, []byte("1\n"), 0o644))
	require.NoError(t, os.MkdirAll("/logs/verifier", 0o755))
	planted := "/logs/verifier/reward.txt"
	if _, err := os.Lstat(planted); err == nil {
		// Someone else's run left one on this machine: it must stay unseen
		// all the same, and it is not ours to replace.
		t.Logf("%s exists already; checking that the verifier does not see it", planted)
		forged = ""
	} else {
		require.NoError(t, os.Symlink(forged, planted))
		t.Cleanup(func() { os.Remove(planted) })
	}

	v := w.grade(t, w.config(t, w.tests(t, "#!/bin/sh\nls -A /logs/verifier\n", nil)))
	assert.Equal(t, grade.StatusNoReward, v.Status, "the planted reward was read")
	assert.NotContains(t, v.StdoutTail, "reward.txt")
	if forged != "" {
		target, err := os.Readlink(planted)
		require.NoError(t, err)
		assert.Equal(t, forged, target)
		b, _ := os.ReadFile(forged)
		assert.Equal(t, "1\n", string(b))
	}
}

// The agent (a session running through grading) sees neither the tests nor
// the verdict, and what it writes into its /logs/verifier is not the reward.
func TestAgentCannotSeeTestsOrVerdictWhileVerifierRuns(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	sync := sharedDir(t)
	agentSaw := agentDuringGrading(t, w, sync, `echo "tests: $(ls -A /tests 2>&1)"; echo "verdict: $(ls -A /logs/verifier 2>&1)"; cat /tests/test.sh 2>&1
  echo 1 > /logs/verifier/reward.txt && echo forged`)
	tests := w.tests(t, `#!/bin/sh
echo secret-test-content > /dev/null
echo 0.25 > /logs/verifier/reward.txt
`+verifierLetsAgentAct(sync), nil)
	v := w.grade(t, w.config(t, tests))
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 0.25}, v.Reward, "the agent's write reached the verdict")
	saw := agentSaw()
	assert.Contains(t, saw, "tests: ls: cannot access '/tests'", "/tests exists in the agent's view while the verifier runs")
	assert.Contains(t, saw, "verdict: \n", "the agent saw the verdict")
	assert.NotContains(t, saw, "secret-test-content")
	assert.Contains(t, saw, "No such file", "the agent could read /tests/test.sh")
}

func TestVerifierCannotWriteCorePattern(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	if unix.Access("/proc/sys/kernel/core_pattern", unix.W_OK) != nil {
		t.Log("the substrate's /proc/sys is read-only already; the test still checks the verifier's view")
	}
	v := w.grade(t, w.config(t, w.tests(t, `#!/bin/sh
bad=""
test -w /proc/sys/kernel/core_pattern && bad="$bad core_pattern"
test -w /proc/sysrq-trigger && bad="$bad sysrq-trigger"
test -w /sys/kernel && bad="$bad /sys"
for m in $(awk '$2 ~ "^/sys/" { print $2 }' /proc/self/mounts); do test -w "$m" && bad="$bad $m"; done
[ -e /proc/kcore ] && [ -s /proc/kcore ] && bad="$bad kcore"
[ -n "$bad" ] && echo "writable or visible:$bad"
if [ -n "$bad" ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt
`, nil)))
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, v.StdoutTail)
}

func TestVerifierCannotSeeHarnessDir(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	other := sandboxHarnessSibling(t, w.harness)
	taskDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(taskDir, "solution.sh"), []byte("secret"), 0o644))
	cfg := w.config(t, w.tests(t, `#!/bin/sh
[ -z "$(ls -A "$HARNESS")" ] || { echo "harness: $(ls -A "$HARNESS")"; exit 1; }
[ -z "$(ls -A "$OTHER")" ] || { echo "other harness visible"; exit 1; }
[ -z "$(ls -A "$TASKDIR")" ] || { echo "task dir visible"; exit 1; }
echo 1 > /logs/verifier/reward.txt
`, nil))
	cfg.Mask = []string{taskDir}
	cfg.Env = append(cfg.Env, "HARNESS="+w.harness, "OTHER="+other, "TASKDIR="+taskDir)
	v := w.grade(t, cfg)
	require.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, v.StdoutTail)
}

// sandboxHarnessSibling makes another marked harness dir next to harness,
// as a second trial on the same host would.
func sandboxHarnessSibling(t *testing.T, harness string) string {
	dir, err := os.MkdirTemp(filepath.Dir(harness), "sandboxd-other-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, masks.HarnessMarker), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte("tests of another trial"), 0o600))
	return dir
}

func TestGradingTwice(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	tests := w.tests(t, `#!/bin/sh
[ -e /logs/verifier/mark ] && { echo stale verdict dir; exit 1; }
[ -e /tests/mark ] && { echo stale tests dir; exit 1; }
touch /logs/verifier/mark /tests/mark
echo 1 > /logs/verifier/reward.txt
`, nil)
	for i := 0; i < 2; i++ {
		v := w.grade(t, w.config(t, tests))
		require.Equal(t, grade.StatusGraded, v.Status, "round %d: %s %s", i, v.Message, v.StdoutTail)
	}
	entries, err := os.ReadDir(filepath.Join(w.harness, "grade"))
	require.NoError(t, err)
	assert.Len(t, entries, 2, "each grading has a directory of its own")
	for _, e := range entries {
		_, err := os.Lstat(filepath.Join(w.harness, "grade", e.Name(), "tests"))
		assert.True(t, os.IsNotExist(err), "the copy of the tests is removed after grading")
	}
}

// Gradings at once each get their own tests and verdict directory
// (docs/failures.md#concurrent-visitors-share-nothing).
func TestConcurrentGradingsShareNothing(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	const n = 4
	var wg sync.WaitGroup
	verdicts := make([]grade.Verdict, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		tests := w.tests(t, fmt.Sprintf(`#!/bin/sh
[ -z "$(ls -A /logs/verifier | grep -v test-stdout.txt)" ] || exit 1
[ "$(cat /tests/me)" = %d ] || exit 1
sleep 1
[ "$(cat /tests/me)" = %d ] || exit 1
echo %d > /logs/verifier/reward.txt
`, i, i, i), map[string]string{"me": strconv.Itoa(i)})
		cfg := w.config(t, tests)
		wg.Add(1)
		go func() {
			defer wg.Done()
			verdicts[i], errs[i] = grade.Run(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		require.NoError(t, errs[i])
		assert.Equal(t, grade.StatusGraded, verdicts[i].Status, "%d: %s %s", i, verdicts[i].Message, verdicts[i].StdoutTail)
		assert.Equal(t, map[string]float64{"reward": float64(i)}, verdicts[i].Reward)
	}
}

func TestMissingTestShIsVerifierError(t *testing.T) {
	w := newWorld(t)
	tests := w.tests(t, "", nil)
	require.NoError(t, os.Remove(filepath.Join(tests, "test.sh")))
	v := w.grade(t, w.config(t, tests))
	assert.Equal(t, grade.StatusError, v.Status)
	assert.Contains(t, v.Message, "tests/test.sh is missing")
	_, err := os.Lstat(filepath.Join(w.harness, "grade"))
	assert.True(t, os.IsNotExist(err), "nothing is made for a task without test.sh")
}

func TestNonRootVerifierWithEmptyEnvironmentRuns(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	cfg := w.config(t, w.tests(t, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", nil))
	cfg.User = idmap.User{UID: 1000, GID: 1000}
	cfg.Workdir = "/"
	cfg.Env = nil // no PATH at all: the script is named by its path
	v := w.grade(t, cfg)
	assert.Equal(t, grade.StatusGraded, v.Status, v.Message)
}

func TestSandboxGoneIsInternalError(t *testing.T) {
	w := newWorld(t)
	cfg := w.config(t, w.tests(t, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", nil))
	w.sb.Holder.Kill()
	cfg.Target = join.Target{PID: w.sb.Target.PID}
	v, err := grade.Run(context.Background(), cfg)
	require.Error(t, err)
	assert.Equal(t, grade.StatusError, v.Status)
	assert.Nil(t, v.Reward)
}

// A root agent that plants a symlink at /tests before grading changes
// nothing: the verifier's /tests exists only in its own view, the planted
// target is neither run nor written, and the symlink is left as it was.
func TestPlantedTestsSymlinkChangesNothing(t *testing.T) {
	w := newWorld(t)
	fake := t.TempDir()
	ran := filepath.Join(fake, "ran")
	require.NoError(t, os.WriteFile(filepath.Join(fake, "test.sh"), []byte("#!/bin/sh\ntouch "+ran+"\necho 1 > /logs/verifier/reward.txt\n"), 0o755))
	sandboxtest.SharedTests(t)
	if err := os.Symlink(fake, "/tests"); err != nil {
		sandboxtest.Need(t, fmt.Sprintf("to plant /tests (%v): a /tests left in this machine's root filesystem is what an agent would see; remove it", err))
	}
	t.Cleanup(func() { os.Remove("/tests") })

	v, err := grade.Run(context.Background(), w.config(t, w.tests(t, "#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n", nil)))
	require.NoError(t, err)
	assert.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 0}, v.Reward, "the task's own test.sh decides")
	_, err = os.Stat(ran)
	assert.True(t, os.IsNotExist(err), "the planted test.sh ran")
	target, err := os.Readlink("/tests")
	require.NoError(t, err)
	assert.Equal(t, fake, target)
	require.NoError(t, os.Remove("/tests"))
}

// A root agent that makes a /tests of its own while the verifier runs, and
// swaps files into it, feeds the verifier nothing: the verifier's /tests is
// a directory of its own view, not a name in the shared filesystem.
func TestAgentTestsDirectoryIsNotTheVerifiers(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	sync := sharedDir(t)
	t.Cleanup(func() { os.RemoveAll("/tests") })
	printed := agentDuringGrading(t, w, sync, `test -e /tests && echo exists
  mkdir -p /tests && echo FAKE > /tests/secret && echo planted
  mount | grep -q ' /tests ' && echo "mount point"`)
	tests := w.tests(t, "#!/bin/sh\n"+verifierLetsAgentAct(sync)+`echo "secret: $(cat /tests/secret 2>&1)"
[ "$(cat /tests/secret)" = REAL ] && echo 1 > /logs/verifier/reward.txt
`, map[string]string{"secret": "REAL"})
	v := w.grade(t, w.config(t, tests))
	agentSaw := printed()
	require.Equal(t, grade.StatusGraded, v.Status, "%s\n%s", v.Message, v.StdoutTail)
	assert.Equal(t, map[string]float64{"reward": 1}, v.Reward, "the verifier read the agent's files: %s", v.StdoutTail)
	assert.NotContains(t, agentSaw, "exists", "grading made /tests in the shared filesystem")
	assert.Contains(t, agentSaw, "planted")
	assert.NotContains(t, agentSaw, "mount point")
	require.NoError(t, os.RemoveAll("/tests"))
	r := w.sb.Sh(t, "0", "grep ' /tests ' /proc/self/mounts")
	assert.NotEqual(t, 0, r.Code, "grading left a mount in the agent's view: %s", r.Stdout)
}
