// Package attack is the escape suite: it serves a Harbor task the way
// `sandboxd serve` does and then behaves like an agent that wants out. Every
// attempt runs as an agent session, as root-in-sandbox and as a non-root
// agent user, and must fail; the suite counts the attempts and prints the
// figures that docs/security.md quotes.
//
//	make attack                                  # both of these
//	go test -count=1 -v -run Escape ./test/attack/
//	scripts/container-tests.sh attack            # the daemon in containers (substrate_test.go)
//
// Network targets are only ever this machine's: the substrate's loopback, a
// test host in a network namespace the suite creates (10.213.77.0/29 and
// fdaa:213:77::/64 on its own veth pair), and a container's own addresses.
// Names are answered by a fake resolver; no DNS query leaves the machine.
// Writes go to a small tmpfs workdir, never to the machine's own files: the
// attempts that must write the shared filesystem (replace a helper binary,
// /etc/hosts, /etc/passwd) run inside a throwaway container. The one
// exception is the race class's host run, which renames and replaces /tests,
// /logs and a missing /run/user — names only sandboxd's tests use, under
// their shared lock — and directories it made, and puts each back.
package attack

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	code := m.Run()
	tally.print(os.Stdout)
	os.Exit(code)
}

// The two agents every attempt is made as.
var agents = []struct{ name, user string }{
	{"root", "0"},
	{"user", "4321:4321"},
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// rollout is one served task: a harness dir with the task baked in as an
// adapted image carries it, a tmpfs workdir, and the daemon in this process.
type rollout struct {
	harness  string
	taskName string
	workdir  string
	client   control.Client
	status   daemon.Status
	sshAddr  string
	agentKey []byte
	// secrets are strings that exist only outside the sandbox; no output of
	// any attempt may contain one.
	secrets map[string]string
	// testsSecret is in the task's tests; a genuine grading prints it.
	testsSecret string
	// done receives what serve returned.
	done chan error
}

type rolloutOptions struct {
	user      string
	network   *config.Network
	resolver  egress.Resolver
	workdirMB int
	// testScript replaces the default verifier, which writes reward 0 and
	// prints the tests' secret.
	testScript string
	// harness is a marked harness dir the caller made; "" is a fresh one
	// under /media.
	harness string
}

// envSecretName is a variable in the daemon's own environment: a harness
// secret that must reach no session.
const envSecretName = "SANDBOXD_ATTACK_HARNESS_SECRET"

func serveTask(t *testing.T, o rolloutOptions) *rollout {
	// Attempts plant /tests in the shared filesystem, and other packages'
	// tests assert it is absent: take the shared lock, and leave none behind.
	sandboxtest.SharedTests(t)
	if _, err := os.Lstat("/tests"); os.IsNotExist(err) {
		// It was not there: whatever the attempts planted goes.
		t.Cleanup(func() { os.RemoveAll("/tests") })
	}
	t.Helper()
	sandboxtest.RequireRoot(t)
	r := &rollout{secrets: map[string]string{}, harness: o.harness}
	if r.harness == "" {
		r.harness = sandboxtest.HarnessDir(t)
	}
	r.taskName = "escape-task-" + randomHex(6)
	r.testsSecret = "TESTS-SECRET-" + randomHex(12)
	solutionSecret := "SOLUTION-SECRET-" + randomHex(12)
	envSecret := "ENV-SECRET-" + randomHex(12)
	t.Setenv(envSecretName, envSecret)

	taskDir := filepath.Join(config.TasksDir(r.harness), r.taskName)
	script := o.testScript
	if script == "" {
		script = defaultTestScript
	}
	files := map[string]string{
		"task.toml":         "schema_version = \"1.1\"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 600.0\n\n[environment]\nallow_internet = true\n",
		"instruction.md":    "Get out of the sandbox.\n",
		"tests/test.sh":     "#!/bin/sh\n# " + r.testsSecret + "\n" + script,
		"tests/secret.txt":  r.testsSecret + "\n",
		"solution/solve.sh": "#!/bin/sh\necho " + solutionSecret + "\n",
	}
	require.NoError(t, writeTree(taskDir, files))
	r.workdir = tmpfsDir(t, cmp.Or(o.workdirMB, 32))
	require.NoError(t, os.WriteFile(filepath.Join(r.workdir, "attack.py"), []byte(attackPy), 0o755))

	cfg := config.Config{
		HarnessDir: r.harness,
		Workdir:    r.workdir,
		AgentUser:  o.user,
		// On the host this machine is a bare host, as under `sandboxd
		// trial`; in the container run the daemon serves as in production.
		HostMode: !inContainerRun,
		SSH:      config.SSH{Listen: "127.0.0.1:0"},
		Resolver: o.resolver,
		Log:      slog.New(slog.DiscardHandler),
	}
	if cfg.Resolver == nil {
		cfg.Resolver = fakeResolver{}
	}
	cfg, err := config.Configure(cfg, r.taskName, nil, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	if o.network != nil {
		cfg.Network = *o.network
	}
	cfg.Log = slog.New(slog.DiscardHandler)

	ctx, cancel := context.WithCancel(context.Background())
	r.done = make(chan error, 1)
	go func() { r.done <- daemon.Run(ctx, cfg) }()
	r.client = control.Client{HarnessDir: r.harness}
	require.Eventually(t, func() bool {
		return r.client.Call(context.Background(), control.Request{Op: "status"}, &r.status) == nil
	}, 20*time.Second, 10*time.Millisecond, "the daemon serves")
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
		}
	})

	require.NotNil(t, r.status.SSH)
	r.sshAddr = r.status.SSH.Listen
	var keys map[string]string
	require.NoError(t, r.client.Call(context.Background(), control.Request{Op: "keys"}, &keys))
	r.agentKey = []byte(keys["private_key"])

	r.secrets["harness dir"] = filepath.Base(r.harness)
	r.secrets["task name"] = r.taskName
	r.secrets["tests"] = r.testsSecret
	r.secrets["solution"] = solutionSecret
	r.secrets["daemon environment"] = envSecret
	r.secrets["SANDBOXD_ variable"] = "SANDBOXD_"
	r.secrets["control socket"] = "control.sock"
	r.secrets["agent private key"] = keyMaterial(r.agentKey)
	hostKey, err := os.ReadFile(filepath.Join(r.harness, "keys", "host_ed25519"))
	require.NoError(t, err)
	r.secrets["host key"] = keyMaterial(hostKey)
	return r
}

// writeTree writes files, named by their paths under dir, as a task's files
// are baked into an image: executable, and the directories made on the way.
func writeTree(dir string, files map[string]string) error {
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// keyMaterial is a line from the middle of a PEM private key.
func keyMaterial(pem []byte) string {
	lines := strings.Split(strings.TrimSpace(string(pem)), "\n")
	if len(lines) < 3 {
		return string(pem)
	}
	return strings.TrimSpace(lines[len(lines)/2])
}

// defaultTestScript is the verifier: reward 0, whatever the agent did, after
// a pause in which a rewriting agent process would have time to act. It
// prints the tests' secret so the verdict shows that the real tests ran.
const defaultTestScript = `echo "verifier uid=$(id -u) cwd=$PWD"
echo 0 > /logs/verifier/reward.txt
sleep 1
echo "reward now: $(cat /logs/verifier/reward.txt)"
ls -la /logs/verifier
echo "tests: $(cat /tests/secret.txt)"
`

// tmpfsDir is a fresh tmpfs of size MiB, world-writable like /tmp, so that
// filling the workdir never fills the machine. In the container run, which
// cannot mount, it is a fresh directory of the tmpfs docker run mounted (64
// MiB for all of them, whatever size asks).
func tmpfsDir(t *testing.T, mb int) string {
	t.Helper()
	if inContainerRun {
		dir, err := os.MkdirTemp(os.Getenv(workdirsEnv), "sandboxd-attack-wd-")
		require.NoError(t, err)
		require.NoError(t, os.Chmod(dir, 0o1777))
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	dir, err := os.MkdirTemp("", "sandboxd-attack-wd-")
	require.NoError(t, err)
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%dm,mode=1777", mb)))
	t.Cleanup(func() {
		unix.Unmount(dir, unix.MNT_DETACH)
		os.Remove(dir)
	})
	return dir
}

// outputMax is how much of a command's output the suite keeps: some attempts
// flood on purpose.
const outputMax = 4 << 20

// result is what one command in the sandbox did.
type result struct {
	stdout, stderr string
	code           int
	err            error
}

func (x result) output() string { return x.stdout + x.stderr }

func (r *rollout) exec(req control.Request, timeout time.Duration) result {
	return execResult(r.client, req, timeout)
}

// execResult runs one exec request through the control socket, as `sandboxd
// exec` does, giving up after timeout.
func execResult(c control.Client, req control.Request, timeout time.Duration) result {
	out, errb := &sandboxtest.Buffer{Max: outputMax}, &sandboxtest.Buffer{Max: outputMax}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	exit, err := c.Exec(ctx, req, control.Streams{Stdout: out, Stderr: errb})
	return result{stdout: out.String(), stderr: errb.String(), code: exit.Code, err: err}
}

// sh runs a script as the rollout's agent user, in the workdir.
func (r *rollout) sh(script string) result {
	return r.exec(control.Request{Argv: []string{"/bin/sh", "-c", script}}, 120*time.Second)
}

// grade grades through the control socket, as `sandboxd grade` does.
func (r *rollout) grade(t *testing.T, timeout time.Duration) grade.Verdict {
	t.Helper()
	v, err := callGrade(r.client, timeout)
	require.NoError(t, err)
	return v
}

// callGrade asks the daemon for a grading and waits at most timeout for the
// verdict.
func callGrade(c control.Client, timeout time.Duration) (grade.Verdict, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var v grade.Verdict
	err := c.Call(ctx, control.Request{Op: "grade"}, &v)
	return v, err
}

// genuine reports whether a verdict is the verifier's own: graded, with the
// default verifier's reward 0, after it printed the real tests' secret.
func genuine(v grade.Verdict, testsSecret string) bool {
	return v.Status == grade.StatusGraded && fmt.Sprint(v.Reward) == "map[reward:0]" && strings.Contains(v.StdoutTail, "tests: "+testsSecret)
}

// leaks names every secret found in s.
func (r *rollout) leaks(s string) []string {
	var out []string
	for what, secret := range r.secrets {
		if secret != "" && strings.Contains(s, secret) {
			out = append(out, what)
		}
	}
	sort.Strings(out)
	return out
}

// leaksBeyond names the secrets found in s that known does not hold.
func (r *rollout) leaksBeyond(s, known string) []string {
	var out []string
	for _, what := range r.leaks(s) {
		if !strings.Contains(known, r.secrets[what]) {
			out = append(out, what)
		}
	}
	return out
}

// fakeResolver answers the suite's names from a table; every other name does
// not exist, so no query ever leaves the machine. A function value answers
// differently over time (DNS rebinding).
type fakeResolver map[string]func() []netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	if fn, ok := f[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return fn(), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func fixed(addrs ...string) func() []netip.Addr {
	return func() []netip.Addr {
		out := make([]netip.Addr, len(addrs))
		for i, a := range addrs {
			out[i] = netip.MustParseAddr(a)
		}
		return out
	}
}

// rebinding answers first, then second for every later query.
func rebinding(first, second string) func() []netip.Addr {
	var mu sync.Mutex
	n := 0
	return func() []netip.Addr {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n == 1 {
			return fixed(first)()
		}
		return fixed(second)()
	}
}

// tally counts attempts across the suite for the summary TestMain prints.
var tally = &counter{byTest: map[string]*[6]int{}}

type counter struct {
	mu sync.Mutex
	// byTest: tried, held (the rest escaped), then tried and held as root
	// and as the non-root agent, by the subtest each attempt ran in.
	byTest map[string]*[6]int
}

func (c *counter) add(test string, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	parts := strings.SplitN(test, "/", 3)
	n := c.byTest[parts[0]]
	if n == nil {
		n = &[6]int{}
		c.byTest[parts[0]] = n
	}
	one := func(i int) {
		n[i]++
		if held {
			n[i+1]++
		}
	}
	one(0)
	if len(parts) > 1 {
		switch parts[1] {
		case "root":
			one(2)
		case "user":
			one(4)
		}
	}
}

func (c *counter) print(w *os.File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byTest) == 0 {
		return
	}
	names := make([]string, 0, len(c.byTest))
	var total [6]int
	for n, v := range c.byTest {
		names = append(names, n)
		for i := range total {
			total[i] += v[i]
		}
	}
	sort.Strings(names)
	where := "host"
	if inContainerRun {
		where = "container"
	}
	fmt.Fprintf(w, "\nescape attempts (%s/%s, %s run; held/tried as root and as the non-root agent):\n", runtime.GOOS, runtime.GOARCH, where)
	line := func(name string, v [6]int) {
		fmt.Fprintf(w, "  %-48s tried %4d  held %4d  escaped %3d  root %4d/%-4d user %4d/%-4d\n", name, v[0], v[1], v[0]-v[1], v[3], v[2], v[5], v[4])
	}
	for _, n := range names {
		line(n, *c.byTest[n])
	}
	line("total", total)
}

// knownOpen are escapes that the suite still finds and that are documented
// as open in docs/security.md, with the design change that closes them. They
// are counted and printed as escaped, loudly, but do not fail the run: the
// suite must stay green to land the fixes of everything else, and an open
// hole is said, not hidden. Each entry names where it is written down.
var knownOpen = map[string]string{}

// record counts one attempt and fails the test when it escaped.
func record(t *testing.T, name string, held bool, detail string) {
	t.Helper()
	tally.add(t.Name(), held)
	if !held && knownOpen[name] != "" {
		t.Logf("ESCAPED (known open, see %s): %s: %s", knownOpen[name], name, clip(detail, 2000))
		return
	}
	if !held {
		t.Errorf("ESCAPED: %s: %s", name, clip(detail, 2000))
	} else if testing.Verbose() {
		t.Logf("held: %s: %s", name, clip(strings.TrimSpace(detail), 300))
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// shq quotes s for the shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// requireTools fails when a program the suite drives is missing.
func requireTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if _, err := os.Stat(n); err != nil {
				t.Fatalf("%s is needed by the escape suite: run scripts/deps.sh test", n)
			}
		}
	}
}
