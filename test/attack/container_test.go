package attack

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// TestEscape_SharedFilesystem makes the attempts that rewrite the shared
// filesystem itself — the substrate's /etc, the daemon's PATH, /tests and
// /logs — which on this machine would rewrite the machine. They run in a
// container, as sandboxd runs in production: the test binary is started in
// a Debian bookworm image with bwrap and util-linux, with the documented
// security options and no network, and serves the task there (role
// attack-in-container below). The container reports each attempt on a line
// of its own.
func TestEscape_SharedFilesystem(t *testing.T) {
	runInContainer(t, roleInContainer)
}

// runInContainer starts this test binary as role in a throwaway Debian
// bookworm container, with the documented security options and no network,
// and records every attempt it reports.
func runInContainer(t *testing.T, role string) {
	hostRunOnly(t)
	requireTools(t, "docker")
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(root, "images/base.sh"), "bookworm", "--with-sandbox-tools").Output()
	require.NoError(t, err, "images/base.sh bookworm --with-sandbox-tools")
	image := strings.TrimSpace(string(out))
	self, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := "sandboxd-attack-" + randomHex(4)
	cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--name", name,
		"--network", "none",
		"--security-opt", "seccomp="+filepath.Join(root, "images/seccomp.json"),
		"--security-opt", "systempaths=unconfined",
		"--security-opt", "apparmor=unconfined",
		"-v", self+":/opt/attack.test:ro",
		"-e", childproc.Env+"="+role,
		image, "/opt/attack.test")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	n := 0
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "ATTEMPT ")
		if !ok {
			t.Log(sc.Text())
			continue
		}
		var a containerAttempt
		require.NoError(t, json.Unmarshal([]byte(line), &a))
		t.Run(a.Agent+"/"+a.Name, func(t *testing.T) {
			if a.Broken {
				t.Errorf("the attempt could not be set up: %s", clip(a.Detail, 2000))
				return
			}
			record(t, a.Name, a.Held, a.Detail)
		})
		n++
	}
	err = cmd.Wait()
	require.NoError(t, err, "the container run: %s", stderr.String())
	require.Greater(t, n, 0, "the container reported no attempt: %s", stderr.String())
}

const roleInContainer = "attack-in-container"

func init() { childproc.Add(roleInContainer, inContainer) }

type containerAttempt struct {
	Agent  string `json:"agent"`
	Name   string `json:"name"`
	Held   bool   `json:"held"`
	Detail string `json:"detail"`
	// Broken means the attempt could not be made at all: the test's fault,
	// not a result.
	Broken bool `json:"broken,omitempty"`
}

func report(agent, name string, held bool, detail string) {
	b, _ := json.Marshal(containerAttempt{Agent: agent, Name: name, Held: held, Detail: detail})
	fmt.Printf("ATTEMPT %s\n", b)
}

// inContainer is the container's side: it is the substrate (root in the
// container), serves a task and plays the agent against it.
func inContainer(_ []string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "attack-in-container: "+format+"\n", args...)
		return 1
	}
	_, forbiddenHits, err := startBannerServices()
	if err != nil {
		return fail("%v", err)
	}
	if err := appendHosts("127.0.0.2 allowed.test"); err != nil {
		return fail("%v", err)
	}
	// Each agent against a rollout of its own, the non-root one first.
	for _, a := range slices.Backward(agents) {
		if err := containerRollout(a.name, a.user, forbiddenHits); err != nil {
			return fail("%s: %v", a.name, err)
		}
	}
	return 0
}

// appendHosts adds a line to the container's /etc/hosts, as an image would
// carry it.
func appendHosts(line string) error {
	hosts, _ := os.ReadFile("/etc/hosts")
	if err := os.WriteFile("/etc/hosts", append(hosts, []byte(line+"\n")...), 0o644); err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	return nil
}

// startBannerServices starts two loopback services in the container: the
// one an allowlisted name (or a peer) stands for, answering "legit", and one
// that no name on any list stands for, answering "forbidden". It returns how
// many connections each got.
func startBannerServices() (legit, forbidden *atomic.Int64, err error) {
	legit, forbidden = new(atomic.Int64), new(atomic.Int64)
	for _, s := range []struct {
		addr   string
		banner string
		hits   *atomic.Int64
	}{{"127.0.0.2:8080", "legit", legit}, {"127.0.0.3:8080", "forbidden", forbidden}} {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen %s: %v", s.addr, err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				s.hits.Add(1)
				// Read the request before answering: a socket closed with
				// the request still unread resets the tunnel, and the agent
				// would see "Connection reset" instead of the banner.
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
						return
					}
					io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n"+s.banner+"\n")
				}()
			}
		}()
	}
	return legit, forbidden, nil
}

// containerServe is a task served in the container: the daemon runs in this
// process, which is the container's pid 1, as serve is in production.
type containerServe struct {
	harness, taskName, secret, workdir string
	client                             control.Client
	holder                             int
	cancel                             context.CancelFunc
	done                               chan error
}

type containerServeOptions struct {
	harness    string // "" is /media/sandboxd-<agent>
	testScript string // "" is defaultTestScript
	// configure adjusts the configuration after config.Configure.
	configure func(cfg *config.Config) error
}

// serveInContainer bakes a task into a harness dir as an adapted image
// carries it and serves it for the agent user, in a workdir of its own.
func serveInContainer(agent, user string, o containerServeOptions) (*containerServe, error) {
	s := &containerServe{harness: cmp.Or(o.harness, "/media/sandboxd-"+agent), taskName: "escape-task-" + randomHex(6), secret: "TESTS-SECRET-" + randomHex(12)}
	files := map[string]string{
		"task.toml":        "schema_version = \"1.1\"\n\n[verifier]\ntimeout_sec = 10.0\n",
		"instruction.md":   "Get out.\n",
		"tests/test.sh":    "#!/bin/sh\n" + cmp.Or(o.testScript, defaultTestScript),
		"tests/secret.txt": s.secret + "\n",
	}
	if err := writeTree(filepath.Join(config.TasksDir(s.harness), s.taskName), files); err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(s.harness, masks.HarnessMarker), nil, 0o600)
	s.workdir = "/work-" + agent
	os.MkdirAll(s.workdir, 0o1777)
	os.Chmod(s.workdir, 0o1777)

	cfg := config.Config{HarnessDir: s.harness, Workdir: s.workdir, AgentUser: user, Log: slog.New(slog.DiscardHandler)}
	cfg, err := config.Configure(cfg, s.taskName, nil, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	if o.configure != nil {
		if err := o.configure(&cfg); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- daemon.Run(ctx, cfg) }()
	s.client = control.Client{HarnessDir: s.harness}
	deadline := time.Now().Add(20 * time.Second)
	var st daemon.Status
	for s.client.Call(context.Background(), control.Request{Op: "status"}, &st) != nil {
		if time.Now().After(deadline) {
			cancel()
			return nil, fmt.Errorf("serve did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.holder = st.Sandbox.PID
	return s, nil
}

// sh runs a script as the agent, in the workdir, with its output mixed.
func (s *containerServe) sh(script string) (string, int) {
	x := execResult(s.client, control.Request{Argv: []string{"/bin/bash", "-c", script}}, time.Minute)
	if x.err != nil {
		return x.output() + x.err.Error(), -1
	}
	return x.output(), x.code
}

func (s *containerServe) gradeWithin(d time.Duration) (grade.Verdict, error) {
	return callGrade(s.client, d)
}

// stop ends serve and waits for it.
func (s *containerServe) stop() error {
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("serve did not stop")
	}
}

func containerRollout(agent, user string, forbiddenHits *atomic.Int64) error {
	s, err := serveInContainer(agent, user, containerServeOptions{configure: func(cfg *config.Config) error {
		// The production resolver (a snapshot of /etc/hosts taken now),
		// minus DNS, so that nothing leaves.
		snap, err := egress.NewSnapshotResolver("/etc/hosts", "/etc/resolv.conf")
		if err != nil {
			return err
		}
		cfg.Resolver = snap.WithServers()
		policy := egress.Policy{Mode: egress.Allowlist, AllowedHosts: []string{"allowed.test"}, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
		cfg.Network = config.Network{Agent: policy, Verifier: policy}
		return nil
	}})
	if err != nil {
		return err
	}
	defer s.cancel()
	harness, secret, sh, gradeWithin := s.harness, s.secret, s.sh, s.gradeWithin
	connect := `exec 3<>/dev/tcp/127.0.0.1/3128 || exit 1
printf 'CONNECT allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n' >&3
read -r status <&3; echo "$status"
while read -r line <&3; do [ "${line%$'\r'}" = "" ] && break; done
printf 'GET / HTTP/1.0\r\n\r\n' >&3; timeout 5 cat <&3`

	// 1. The allowlisted name reaches its service; then the agent rewrites
	// the substrate's /etc/hosts, which the daemon's resolver reads.
	out, code := sh(connect)
	if code != 0 || !strings.Contains(out, "legit") {
		return fmt.Errorf("the allowlisted name does not work to begin with: %d %s", code, out)
	}
	before := forbiddenHits.Load()
	out, _ = sh(`printf '127.0.0.1 localhost\n127.0.0.3 allowed.test\n' > /etc/hosts 2>&1 && echo rewrote /etc/hosts; sleep 6; ` + connect)
	held := forbiddenHits.Load() == before
	report(agent, "point an allowlisted name elsewhere through the substrate's /etc/hosts", held, out)
	hosts, _ := os.ReadFile("/etc/hosts")
	os.WriteFile("/etc/hosts", []byte(strings.ReplaceAll(string(hosts), "127.0.0.3 allowed.test", "127.0.0.2 allowed.test")), 0o644)

	// 2. A FIFO at /etc/passwd: the daemon resolved its users at start and
	// reads no user database that could block; grading must answer, within
	// the verifier's own timeout (a test.sh that reads the FIFO hangs like
	// it would under Harbor, and that is a verifier_timeout, never a 0).
	out, _ = sh(`mv /etc/passwd /etc/passwd.agent && mkfifo -m 644 /etc/passwd && echo planted`)
	if strings.Contains(out, "planted") {
		start := time.Now()
		v, err := gradeWithin(90 * time.Second)
		report(agent, "hang grading with a FIFO at the substrate's /etc/passwd", err == nil, fmt.Sprintf("after %s: %v %+v", time.Since(start).Round(time.Millisecond), err, v))
		// Unblock whatever reads it, and put the file back.
		if f, err := os.OpenFile("/etc/passwd", os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		os.Remove("/etc/passwd")
		os.Rename("/etc/passwd.agent", "/etc/passwd")
	} else {
		report(agent, "hang grading with a FIFO at the substrate's /etc/passwd", true, out)
	}

	// 3. /tests as a symlink into /etc before grading: nothing is written
	// through it, and no reward comes of it.
	out, _ = sh(`ln -s /etc /tests && echo planted`)
	v, err := gradeWithin(2 * time.Minute)
	_, statErr := os.Stat("/etc/test.sh")
	report(agent, "plant /tests as a symlink to /etc", err == nil && !(v.Status == grade.StatusGraded && !genuine(v, secret)) && statErr != nil, fmt.Sprintf("%s %v %+v", out, err, v))
	os.Remove("/tests")

	// 4. Rename /logs and make a /logs/verifier of the agent's own, which the
	// sandbox's mask (moved away with the old /logs) no longer covers: the
	// reward is the verifier's all the same, but the verdict files copied
	// out after grading must not land where the agent reads them.
	out, _ = sh(`mv /logs /logs.agent && mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo renamed`)
	v, err = gradeWithin(2 * time.Minute)
	forged := v.Status == grade.StatusGraded && !genuine(v, secret)
	report(agent, "rename /logs before grading: forge the reward", err == nil && !forged, fmt.Sprintf("%s %v %+v", out, err, v))
	out2, _ := sh(`ls -la /logs/verifier 2>&1; cat /logs/verifier/* 2>/dev/null | head -50`)
	report(agent, "rename /logs before grading: read the verdict files", !strings.Contains(out2, secret), out2)
	sh(`rm -rf /logs && mv /logs.agent /logs; true`)

	// 5. pid 1 of the sandbox (the holder's shell) starts sleep(1) from the
	// shared filesystem whenever its sleep ends: a sleep of the agent's runs
	// as pid 1's child, outside the seccomp filter that keeps sessions from
	// making user namespaces.
	plant := `#!/bin/sh
[ "$PPID" = 1 ] && { echo "pid $$, parent $PPID"; grep -E "^(Cap(Prm|Bnd)|Seccomp|NoNewPrivs)" /proc/self/status; unshare -U sh -c "echo NESTED-USERNS: \$(readlink /proc/self/ns/user), uid \$(id -u)"; } > /var/tmp/pid1-child-` + agent + ` 2>&1
exec /var/tmp/sleep.real "$@"
`
	out, _ = sh(`cp /bin/sleep /var/tmp/sleep.real && printf '%s' ` + shq(plant) + ` > /var/tmp/sleep.agent && chmod 755 /var/tmp/sleep.agent && mv /var/tmp/sleep.agent "$(readlink -f /bin/sleep)" && echo planted; ` +
		`for p in /proc/[0-9]*; do [ "$(awk '/^PPid/ {print $2}' $p/status 2>/dev/null)" = 1 ] && [ "$(cat $p/comm 2>/dev/null)" = sleep ] && kill -9 ${p#/proc/}; done; timeout 3 tail -f /dev/null; cat /var/tmp/pid1-child-` + agent + ` 2>&1`)
	report(agent, "get a process started by pid 1 (a planted sleep) and make a user namespace from it", !strings.Contains(out, "NESTED-USERNS"), out)
	if _, err := os.Stat("/var/tmp/sleep.real"); err == nil {
		real, _ := filepath.EvalSymlinks("/bin/sleep")
		os.Rename("/var/tmp/sleep.real", real)
	}

	// 6. A program of the agent's on the daemon's PATH, ahead of the real
	// nsenter: the next session, grading or ssh -L runs it as the
	// substrate's root, outside every namespace.
	evil := `#!/bin/sh
{ echo "ran as $(id -u) in $(readlink /proc/self/ns/mnt)"; ls -la ` + harness + `; cat ` + harness + `/tasks/*/tests/secret.txt; } > /var/tmp/pwned-` + agent + ` 2>&1
exec /usr/bin/nsenter "$@"
`
	out, _ = sh(`printf '%s' ` + shq(evil) + ` > /usr/local/sbin/nsenter && chmod 755 /usr/local/sbin/nsenter && echo planted`)
	sh(`echo a new session`)
	v, _ = gradeWithin(2 * time.Minute)
	pwned, perr := os.ReadFile("/var/tmp/pwned-" + agent)
	report(agent, "put an nsenter of the agent's on the daemon's PATH", perr != nil, fmt.Sprintf("%s; /var/tmp/pwned-%s: %s (verdict %s)", out, agent, pwned, v.Status))
	out, _ = sh(`cat /var/tmp/pwned-` + agent + ` 2>&1`)
	report(agent, "read the tests through what that nsenter wrote", !strings.Contains(out, secret), out)
	os.Remove("/usr/local/sbin/nsenter")

	// 7. /etc/ld.so.preload of the shared filesystem, naming a library that
	// exists in the sandbox's view only (in its mask over /logs/verifier):
	// programs in the sandbox find it and reject it ("file too short"), while
	// one that the daemon starts in the substrate cannot open it. Seeing the
	// second message means a helper of the daemon's, running as the
	// container's root, loads what the agent lists there; with a real
	// library, that is the agent's code.
	out, _ = sh(`: > /logs/verifier/preload.so && echo /logs/verifier/preload.so > /etc/ld.so.preload && echo planted`)
	out2, _ = sh(`true`)
	report(agent, "list a library in the shared /etc/ld.so.preload for the daemon's helpers", !strings.Contains(out2, "cannot open shared object file"),
		fmt.Sprintf("%s; the next session printed: %s", strings.TrimSpace(out), out2))
	os.Remove("/etc/ld.so.preload")

	// The daemon served all along.
	out, code = sh("echo alive")
	report(agent, "the daemon serves after all of it", code == 0 && out == "alive\n", out)
	return s.stop()
}
