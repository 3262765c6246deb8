package sshd_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// The benchmarks measure sandboxd against OpenSSH's sshd started on
// loopback by the benchmark itself, both driven by the same Go client in
// the same run, and report the ratio (sandboxd ÷ sshd) next to both
// figures. sshd runs commands without any sandbox; sandboxd joins one for
// every command.
//
//	go test -run '^$' -bench . -benchtime 1x ./pkg/sshd/   # make bench

// peer is one SSH server under test.
type peer struct {
	name string
	addr string
	cfg  *ssh.ClientConfig
}

// dial connects to the peer; the connection is closed when the benchmark
// ends, before the servers are stopped.
func (p peer) dial(b testing.TB) *ssh.Client {
	b.Helper()
	c, err := ssh.Dial("tcp", p.addr, p.cfg)
	require.NoError(b, err)
	b.Cleanup(func() { c.Close() })
	return c
}

// startOpenSSH runs /usr/sbin/sshd -D on a free loopback port with a
// generated configuration that accepts signer for root.
func startOpenSSH(b testing.TB, signer ssh.Signer) peer {
	b.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		requireTool(b, sshd, "openssh-server")
	}
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		b.Skipf("cannot create /run/sshd: %v", err)
	}
	dir := b.TempDir()
	hostKey, _ := newKey(b, dir, "ssh_host_ed25519_key")
	auth := filepath.Join(dir, "authorized_keys")
	require.NoError(b, os.WriteFile(auth, ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600))
	port := freePort(b)
	conf := filepath.Join(dir, "sshd_config")
	require.NoError(b, os.WriteFile(conf, []byte(fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s/sshd.pid
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
MaxSessions 1000
MaxStartups 1000
Subsystem sftp /usr/lib/openssh/sftp-server
`, port, hostKey, dir, auth)), 0o600))
	cmd := exec.Command(sshd, "-D", "-e", "-f", conf)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	// sshd's per-connection children inherit its stderr and outlive the
	// listener until their client goes: do not wait for them.
	cmd.WaitDelay = time.Second
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	require.Eventually(b, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "sshd did not start: %s", errb.String())
	return peer{name: "openssh", addr: addr, cfg: clientConfig("root", signer)}
}

func clientConfig(user string, signer ssh.Signer) *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
	}
}

func peers(b *testing.B) (sandboxd, openssh peer) {
	ts := startServer(b, options{})
	sandboxd = peer{name: "sandboxd", addr: ts.addr, cfg: clientConfig("agent", ts.agentSign)}
	return sandboxd, startOpenSSH(b, ts.agentSign)
}

// compare runs op(n) b.N times against each peer, after a short warm-up
// (page cache, sshd's first fork, the join path), and reports both averages
// and their ratio. The peers take turns in rounds of n/10 operations, so
// that the load of a shared machine drifting during the run weighs on both
// alike. op returns its average over the k operations it ran.
func compare(b *testing.B, unit string, a, z peer, n int, op func(b *testing.B, p peer, k int) float64) {
	b.Helper()
	b.StopTimer()
	ps := []peer{a, z}
	for _, p := range ps {
		op(b, p, max(1, n/50))
	}
	rounds := min(n, 10)
	sums := map[string]float64{}
	for range b.N {
		for r := range rounds {
			k := n/rounds + boolInt(r < n%rounds)
			for _, p := range ps {
				sums[p.name] += op(b, p, k) * float64(k)
			}
		}
	}
	results := map[string]float64{}
	for _, p := range ps {
		results[p.name] = sums[p.name] / float64(n*b.N)
		b.Logf("%s: %.3f %s", p.name, results[p.name], unit)
	}
	b.ReportMetric(results[a.name], a.name+"-"+unit)
	b.ReportMetric(results[z.name], z.name+"-"+unit)
	b.ReportMetric(results[a.name]/results[z.name], "ratio")
	b.ReportMetric(0, "ns/op")
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

func execTrue(b *testing.B, c *ssh.Client) {
	s, err := c.NewSession()
	require.NoError(b, err)
	require.NoError(b, s.Run("true"))
	s.Close()
}

// BenchmarkExecRoundTrip: 500 sequential `exec true` over one established
// connection (target: sandboxd ≤ 0.1× sshd).
func BenchmarkExecRoundTrip(b *testing.B) {
	sd, os := peers(b)
	clients := map[string]*ssh.Client{sd.name: sd.dial(b), os.name: os.dial(b)}
	compare(b, "ms/exec", sd, os, 500, func(b *testing.B, p peer, n int) float64 {
		c := clients[p.name]
		start := time.Now()
		for range n {
			execTrue(b, c)
		}
		return float64(time.Since(start).Microseconds()) / 1000 / float64(n)
	})
}

// BenchmarkConnectAndExec: a new connection plus one exec (target: ≤ 0.3×).
func BenchmarkConnectAndExec(b *testing.B) {
	sd, os := peers(b)
	compare(b, "ms/conn", sd, os, 50, func(b *testing.B, p peer, n int) float64 {
		start := time.Now()
		for range n {
			c := p.dial(b)
			execTrue(b, c)
			c.Close()
		}
		return float64(time.Since(start).Microseconds()) / 1000 / float64(n)
	})
}

// BenchmarkThroughput1GiB: 1 GiB from a command's stdout (target: ≥ 1.0×).
func BenchmarkThroughput1GiB(b *testing.B) {
	sd, os := peers(b)
	clients := map[string]*ssh.Client{sd.name: sd.dial(b), os.name: os.dial(b)}
	// Three transfers each, alternating, after a warm-up transfer.
	compare(b, "MiB/s", sd, os, 3, func(b *testing.B, p peer, _ int) float64 {
		s, err := clients[p.name].NewSession()
		require.NoError(b, err)
		defer s.Close()
		out, err := s.StdoutPipe()
		require.NoError(b, err)
		start := time.Now()
		require.NoError(b, s.Start("head -c 1073741824 /dev/zero"))
		n, err := io.Copy(io.Discard, out)
		require.NoError(b, err)
		require.NoError(b, s.Wait())
		require.Equal(b, int64(1<<30), n)
		return 1024 / time.Since(start).Seconds()
	})
}

// BenchmarkPTYEcho200: 200 concurrent pty sessions, each typing 50
// keystrokes and timing the terminal's echo; reports p50/p99 echo latency
// and the RSS of the process serving them (targets: p99 ≤ 5 ms, RSS ≤ 100 MB).
// The server runs inside the benchmark's process, so the RSS also counts
// the 200 Go clients: an upper bound on the daemon's own.
func BenchmarkPTYEcho200(b *testing.B) {
	ts := startServer(b, options{})
	sd := peer{name: "sandboxd", addr: ts.addr, cfg: clientConfig("agent", ts.agentSign)}
	const sessions, keys = 200, 50
	var all []time.Duration
	var peakRSS int64
	for range b.N {
		var mu sync.Mutex
		var lat []time.Duration
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for range sessions {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				mine, err := echoSession(sd, keys, ready.Done, start)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		ready.Wait()
		close(start)
		time.Sleep(200 * time.Millisecond)
		peakRSS = max(peakRSS, rss())
		done.Wait()
		all = append(all, lat...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(peakRSS)/(1<<20), "RSS-MiB")
	b.ReportMetric(0, "ns/op")
}

// echoSession opens one pty session running cat, calls ready (also on
// failure, so that the benchmark never waits for a session that died),
// waits for start, then times keys echoed keystrokes.
func echoSession(p peer, keys int, ready func(), start <-chan struct{}) ([]time.Duration, error) {
	var once sync.Once
	defer once.Do(ready)
	c, err := ssh.Dial("tcp", p.addr, p.cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{ssh.ECHO: 1, ssh.ICANON: 1}); err != nil {
		return nil, err
	}
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	if err := s.Start("cat >/dev/null"); err != nil {
		return nil, err
	}
	defer s.Signal(ssh.SIGKILL)
	// The first echo also waits for the command to start; it is not a
	// keystroke's latency.
	buf := make([]byte, 1)
	if _, err := in.Write([]byte{'w'}); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(out, buf); err != nil {
		return nil, err
	}
	once.Do(ready)
	<-start
	lat := make([]time.Duration, 0, keys)
	for range keys {
		t0 := time.Now()
		if _, err := in.Write([]byte{'k'}); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(out, buf); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(10 * time.Millisecond)
	}
	return lat, nil
}

// rss is this process's resident set size in bytes.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
