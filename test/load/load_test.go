// Package load drives one daemon with many sessions and many tunnels and
// checks that what it holds — descriptors, goroutines, child processes,
// memory, processes in the sandbox — returns to where it started. The
// default run is short (CI); the soak run is issue 7's full figures:
//
//	go test -count=1 -v ./test/load/                       # short: ~1 minute
//	make soak                                              # 10,000 sequential, 500 concurrent
//	SANDBOXD_SOAK=1 go test -count=1 -v -timeout 60m ./test/load/
package load

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/egress"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// soak selects issue 7's full figures; soak_test.go sets it under -tags soak.
var soak = os.Getenv("SANDBOXD_SOAK") != ""

func sizes() (sequential, concurrent int) {
	if soak {
		return 10000, 500
	}
	return 400, 100
}

// served is a daemon in this process, so that its goroutines, descriptors
// and memory are this process's.
type served struct {
	harness string
	workdir string
	client  control.Client
	status  daemon.Status
	sshKey  ssh.Signer
}

type resolver map[string]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func serve(t *testing.T, network *config.Network, res egress.Resolver) *served {
	sandboxtest.SharedTests(t)
	t.Helper()
	sandboxtest.RequireRoot(t)
	s := &served{harness: sandboxtest.HarnessDir(t), workdir: t.TempDir()}
	require.NoError(t, os.Chmod(s.workdir, 0o1777))
	cfg := config.Config{
		HarnessDir: s.harness, Workdir: s.workdir, HostMode: true,
		SSH: config.SSH{Listen: "127.0.0.1:0"}, Resolver: res,
		Log: slog.New(slog.DiscardHandler),
	}
	if network != nil {
		cfg.Network = *network
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg) }()
	s.client = control.Client{HarnessDir: s.harness}
	require.Eventually(t, func() bool {
		return s.client.Call(context.Background(), control.Request{Op: "status"}, &s.status) == nil
	}, 20*time.Second, 10*time.Millisecond)
	var keys map[string]string
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "keys"}, &keys))
	var err error
	s.sshKey, err = ssh.ParsePrivateKey([]byte(keys["private_key"]))
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	return s
}

// dial logs in over SSH as the agent. The tests close the client before
// they measure; the test's end closes it in any case.
func (s *served) dial(t *testing.T) *ssh.Client {
	t.Helper()
	return sandboxtest.DialSSH(t, s.status.SSH.Listen, s.sshKey)
}

// snapshot is what the daemon holds at one moment.
type snapshot struct {
	FDs, Goroutines, Children, RSSMiB int
	SandboxProcs, SandboxZombies      int
}

func (s snapshot) String() string {
	return fmt.Sprintf("fds %d, goroutines %d, child processes %d, RSS %d MiB, processes in the sandbox %d (zombies %d)",
		s.FDs, s.Goroutines, s.Children, s.RSSMiB, s.SandboxProcs, s.SandboxZombies)
}

func (s *served) measure() snapshot {
	runtime.GC()
	debug.FreeOSMemory()
	var snap snapshot
	fds, _ := os.ReadDir("/proc/self/fd")
	snap.FDs = len(fds)
	snap.Goroutines = runtime.NumGoroutine()
	snap.RSSMiB = sandboxtest.RSSMiB()
	me := os.Getpid()
	pidNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.status.Sandbox.PID))
	for _, pid := range procfs.PIDs() {
		st, err := procfs.ReadStat(pid)
		if err != nil {
			continue
		}
		if st.PPID == me {
			snap.Children++
		}
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); ns == pidNS {
			snap.SandboxProcs++
			if st.State == 'Z' {
				snap.SandboxZombies++
			}
		}
	}
	return snap
}

// How far over its baseline settled lets the daemon stay.
const (
	fdSlack        = 4
	goroutineSlack = 8
	rssSlackMiB    = 64
)

// settled waits until the daemon is back within slack of base and returns
// what it measured last.
func (s *served) settled(t *testing.T, base snapshot) snapshot {
	t.Helper()
	var now snapshot
	deadline := time.Now().Add(30 * time.Second)
	for {
		now = s.measure()
		back := now.FDs <= base.FDs+fdSlack && now.Goroutines <= base.Goroutines+goroutineSlack && now.Children <= base.Children &&
			now.SandboxProcs <= base.SandboxProcs && now.SandboxZombies == 0
		if back || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	assert.LessOrEqual(t, now.FDs, base.FDs+fdSlack, "descriptors return to the baseline")
	assert.LessOrEqual(t, now.Goroutines, base.Goroutines+goroutineSlack, "goroutines return to the baseline")
	assert.LessOrEqual(t, now.Children, base.Children, "no child process is left")
	assert.LessOrEqual(t, now.SandboxProcs, base.SandboxProcs, "no process is left in the sandbox")
	assert.Zero(t, now.SandboxZombies, "no zombie is left in the sandbox")
	assert.LessOrEqual(t, now.RSSMiB, base.RSSMiB+rssSlackMiB, "memory returns near the baseline")
	return now
}

// session runs one session of the given kind and checks its output:
// 0 control exec, 1 control exec with a terminal, 2 SSH exec, 3 SSH with a pty.
func (s *served) session(c *ssh.Client, kind, n int, hold string) error {
	word := "s" + strconv.Itoa(n)
	script := hold + "echo " + word
	switch kind {
	case 0, 1:
		var out sandboxtest.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		exit, err := s.client.Exec(ctx, control.Request{Argv: []string{"/bin/sh", "-c", script}, TTY: kind == 1}, control.Streams{Stdout: &out, Stderr: &out})
		if err != nil {
			return err
		}
		if exit.Code != 0 || strings.TrimSpace(out.String()) != word {
			return fmt.Errorf("exec %d (tty %v): exit %d, %q", n, kind == 1, exit.Code, out.String())
		}
	default:
		sess, err := c.NewSession()
		if err != nil {
			return fmt.Errorf("ssh session %d: %w", n, err)
		}
		defer sess.Close()
		if kind == 3 {
			if err := sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
				return err
			}
		}
		out, err := sess.CombinedOutput(script)
		if err != nil || strings.TrimSpace(string(out)) != word {
			return fmt.Errorf("ssh %d (pty %v): %v, %q", n, kind == 3, err, out)
		}
	}
	return nil
}

// baseline warms the daemon up with one session of each kind, so that what
// it sets up once is not taken for a leak, and measures it.
func (s *served) baseline(t *testing.T) snapshot {
	t.Helper()
	warm := s.dial(t)
	for k := 0; k < 4; k++ {
		require.NoError(t, s.session(warm, k, k, ""))
	}
	warm.Close()
	base := s.measure()
	t.Logf("baseline: %s", base)
	return base
}

func TestLoad_SequentialSessions(t *testing.T) {
	n, _ := sizes()
	s := serve(t, nil, nil)
	base := s.baseline(t)

	c := s.dial(t)
	start := time.Now()
	for i := 0; i < n; i++ {
		require.NoError(t, s.session(c, i%4, i, ""))
		if (i+1)%(n/4) == 0 {
			t.Logf("%d sessions in %s: %s", i+1, time.Since(start).Round(time.Millisecond), s.measure())
		}
	}
	c.Close()
	elapsed := time.Since(start)
	after := s.settled(t, base)
	t.Logf("%d sequential sessions (exec, exec -t, ssh exec, ssh pty) in %s (%.1f/s)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	t.Logf("baseline: %s", base)
	t.Logf("after:    %s", after)
}

func TestLoad_ConcurrentSessions(t *testing.T) {
	_, n := sizes()
	s := serve(t, nil, nil)
	base := s.baseline(t)

	// SSH sessions spread over connections of at most 48 channels each
	// (sshd's per-connection limit is 64).
	var clients []*ssh.Client
	for i := 0; i < (n/2+47)/48; i++ {
		clients = append(clients, s.dial(t))
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	start := time.Now()
	// Each session holds for a moment, so that they all overlap.
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			kind := i % 4
			var c *ssh.Client
			if kind >= 2 {
				// The k-th SSH session goes to connection k mod len(clients).
				c = clients[((i/4)*2+kind-2)%len(clients)]
			}
			if err := s.session(c, kind, i, "sleep 2; "); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}
		}(i)
	}
	time.Sleep(time.Second)
	peak := s.measure()
	wg.Wait()
	elapsed := time.Since(start)
	for _, c := range clients {
		c.Close()
	}
	if p := firstErr.Load(); p != nil {
		t.Errorf("%d of %d concurrent sessions failed; the first: %v", failed.Load(), n, *p)
	}
	after := s.settled(t, base)
	t.Logf("%d concurrent sessions (a quarter each: exec, exec -t, ssh exec, ssh pty) in %s", n, elapsed.Round(time.Millisecond))
	t.Logf("baseline: %s", base)
	t.Logf("peak:     %s", peak)
	t.Logf("after:    %s", after)
}

// TestLoad_ProxyTunnels: 200 tunnels through the agent proxy at once, a
// slow-loris client dribbling a request head, and fresh clients that must
// be served all the while.
func TestLoad_ProxyTunnels(t *testing.T) {
	// The upstream: an echo server on the substrate's loopback, opened to
	// the proxy deliberately (as --egress-allow-cidr would).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var upstreamConns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			upstreamConns.Add(1)
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	policy := egress.Policy{Mode: egress.Public, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	s := serve(t, &config.Network{Agent: policy, Verifier: policy}, resolver{"echo.test": netip.MustParseAddr("127.0.0.1")})
	script := filepath.Join(s.workdir, "tunnels.py")
	require.NoError(t, os.WriteFile(script, []byte(tunnelsPy), 0o755))
	base := s.measure()
	t.Logf("baseline: %s", base)

	var out sandboxtest.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exit, err := s.client.Exec(ctx, control.Request{Argv: []string{"/usr/bin/python3", script, strconv.Itoa(port), "200", "20"}}, control.Streams{Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	t.Logf("%s", strings.TrimSpace(out.String()))
	require.Equal(t, 0, exit.Code, out.String())
	assert.Contains(t, out.String(), "tunnels ok 200/200")
	assert.Contains(t, out.String(), "fresh ok 20/20")
	assert.Contains(t, out.String(), "tunnels still ok 200/200")
	after := s.settled(t, base)
	t.Logf("after:    %s", after)
	t.Logf("upstream connections: %d", upstreamConns.Load())
}

// tunnelsPy runs inside the sandbox: N tunnels held open, a slow-loris
// client, then M fresh clients timed while all of that goes on.
const tunnelsPy = `
import socket, sys, threading, time
port, n, m = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def tunnel(i):
    s = socket.create_connection(("127.0.0.1", 3128), 10); s.settimeout(20)
    s.sendall(("CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test:%d\r\n\r\n" % (port, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1024)
        if not chunk: raise OSError("closed during the head")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"): raise OSError(head.split(b"\r\n")[0].decode())
    msg = ("ping %d\n" % i).encode(); s.sendall(msg)
    got = b""
    while len(got) < len(msg): got += s.recv(1024)
    if got != msg: raise OSError("echo %r" % got)
    return s
def ping(s, i):
    msg = ("again %d\n" % i).encode(); s.sendall(msg)
    got = b""
    while len(got) < len(msg): got += s.recv(1024)
    return got == msg
held, errors = [], []
lock = threading.Lock()
def open_one(i):
    try:
        s = tunnel(i)
        with lock: held.append((i, s))
    except Exception as e:
        with lock: errors.append(str(e))
threads = [threading.Thread(target=open_one, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print("tunnels ok %d/%d" % (len(held), n), "errors:", errors[:3], flush=True)
# The slow loris: a request head, one byte every half second.
loris = socket.create_connection(("127.0.0.1", 3128), 10)
stop = False
def dribble():
    for b in b"CONNECT echo.test:%d HTTP/1.1\r\nHost: x\r\n" % port:
        if stop: return
        try: loris.send(bytes([b]))
        except OSError: return
        time.sleep(0.5)
threading.Thread(target=dribble, daemon=True).start()
time.sleep(1)
ok, worst = 0, 0.0
for i in range(m):
    t0 = time.time()
    try:
        s = tunnel(10000 + i); s.close(); ok += 1
    except Exception as e:
        print("fresh client failed:", e)
    worst = max(worst, time.time() - t0)
print("fresh ok %d/%d, slowest %.3fs" % (ok, m, worst), flush=True)
alive = sum(1 for i, s in held if ping(s, i))
print("tunnels still ok %d/%d" % (alive, len(held)), flush=True)
stop = True
for _, s in held: s.close()
loris.close()
sys.exit(0 if ok == m and alive == n and worst < 5 else 1)
`
