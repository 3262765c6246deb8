package sshd_test

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenSSHExecExitCodes(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	for _, code := range []int{0, 1, 7} {
		r := run(t, ts.ssh(t, "agent@127.0.0.1", fmt.Sprintf("echo out; echo err >&2; exit %d", code)), "")
		assert.Equal(t, code, r.code, r.stderr)
		assert.Equal(t, "out\n", r.stdout)
		assert.Equal(t, "err\n", r.stderr)
	}
	// Death by signal: OpenSSH's client has no code for exit-signal and
	// exits 255; it must not hang or lose the output.
	r := run(t, ts.ssh(t, "agent@127.0.0.1", "echo before; kill -KILL $$"), "")
	assert.Equal(t, 255, r.code)
	assert.Equal(t, "before\n", r.stdout)
}

func TestLoginNameIsIgnored(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	for _, login := range []string{"root", "agent", "nobody"} {
		r := run(t, ts.ssh(t, login+"@127.0.0.1", "id -u; id -g; pwd"), "")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, fmt.Sprintf("1000\n1000\n%s\n", ts.workdir), r.stdout, "login %s", login)
	}
}

// startUnderPTY runs an OpenSSH client on a local terminal of the given
// size, as a person would.
func startUnderPTY(t *testing.T, cmd *exec.Cmd, cols, rows uint16) (*os.File, *lineReader) {
	t.Helper()
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: rows})
	require.NoError(t, err)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		f.Close()
	})
	lr := &lineReader{}
	go lr.consume(f)
	return f, lr
}

// lineReader accumulates a terminal's output for polling.
type lineReader struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lineReader) consume(r io.Reader) {
	b := make([]byte, 4096)
	for {
		n, err := r.Read(b)
		l.mu.Lock()
		l.buf.Write(b[:n])
		l.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (l *lineReader) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *lineReader) waitFor(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	require.Eventually(t, func() bool {
		m = rx.FindStringSubmatch(l.String())
		return m != nil
	}, 20*time.Second, 10*time.Millisecond, "waiting for %q in %q", re, l.String())
	return m
}

func TestOpenSSHInteractiveTerminal(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	cmd := ts.ssh(t, "-tt", "agent@127.0.0.1")
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	term, out := startUnderPTY(t, cmd, 101, 33)
	// Type as a person does: each line once the prompt is back.
	prompts := 0
	typeLine := func(line string) {
		t.Helper()
		prompts++
		out.waitFor(t, fmt.Sprintf(`(?s)(\$ .*){%d}`, prompts))
		io.WriteString(term, line)
	}
	typeLine("echo T=$(tty) S=$(stty size) TERM=$TERM\r")
	m := out.waitFor(t, `T=(/dev/pts/\d+) S=33 101 TERM=xterm-256color`)
	assert.NotEmpty(t, m[1])

	// Job control: a background job, brought to the foreground, then
	// interrupted with ^C; the shell survives and reports 130.
	typeLine("sleep 100 &\r")
	out.waitFor(t, `\[1\] \d+`)
	typeLine("fg\r")
	out.waitFor(t, `fg\r\n.*sleep 100\r\n`)
	time.Sleep(200 * time.Millisecond)
	io.WriteString(term, "\x03")
	typeLine("echo code=$?\r")
	out.waitFor(t, `code=130`)

	// window-change reaches the running shell.
	require.NoError(t, pty.Setsize(term, &pty.Winsize{Cols: 120, Rows: 40}))
	require.NoError(t, cmd.Process.Signal(syscall.SIGWINCH))
	time.Sleep(200 * time.Millisecond)
	typeLine("echo size=$(stty size)\r")
	out.waitFor(t, `size=40 120`)

	typeLine("exit 3\r")
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 3, ee.ExitCode())
}

func TestOpenSSHForcedTTYWithoutLocalTerminal(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	// ssh -tt with stdin not a terminal asks for a 0x0 pty: accepted.
	r := run(t, ts.ssh(t, "-tt", "agent@127.0.0.1", "tty; stty size; exit 5"), "")
	assert.Equal(t, 5, r.code, r.stderr)
	assert.Regexp(t, `^/dev/pts/\d+\r\n0 0\r\n$`, r.stdout)
}

func TestOpenSSHControlMasterMultiplexes20Commands(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	sock := filepath.Join(t.TempDir(), "mux")
	mux := []string{"-o", "ControlMaster=auto", "-o", "ControlPath=" + sock, "-o", "ControlPersist=60"}
	r := run(t, ts.ssh(t, append(mux, "agent@127.0.0.1", "true")...), "")
	require.Equal(t, 0, r.code, r.stderr)
	t.Cleanup(func() { run(t, ts.ssh(t, append(mux, "-O", "exit", "agent@127.0.0.1")...), "") })

	var wg sync.WaitGroup
	results := make([]result, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(t, ts.ssh(t, append(mux, "agent@127.0.0.1", fmt.Sprintf("echo n=%d; exit %d", i, i%4))...), "")
		}()
	}
	wg.Wait()
	for i, r := range results {
		assert.Equal(t, i%4, r.code, "command %d: %s", i, r.stderr)
		assert.Equal(t, fmt.Sprintf("n=%d\n", i), r.stdout)
	}
	check := run(t, ts.ssh(t, append(mux, "-O", "check", "agent@127.0.0.1")...), "")
	assert.Equal(t, 0, check.code, "the master is still up: %s", check.stderr)
}

func TestOpenSSHLocalForwardReachesTheSandbox(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	// An earlier session starts a server on the sandbox's own loopback and
	// leaves it running.
	dport := freePort(t)
	r := run(t, ts.ssh(t, "agent@127.0.0.1", fmt.Sprintf(
		`echo hello-from-sandbox > index.html; nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 & echo started`, dport)), "")
	require.Equal(t, 0, r.code, r.stderr)

	// The substrate cannot see it: it lives in the sandbox's network.
	_, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", dport), time.Second)
	require.Error(t, err, "the sandbox's server is reachable from the substrate")

	lport := freePort(t)
	fwd := ts.ssh(t, "-N", "-o", "ExitOnForwardFailure=yes", "-L", fmt.Sprintf("127.0.0.1:%d:localhost:%d", lport, dport), "agent@127.0.0.1")
	require.NoError(t, fwd.Start())
	t.Cleanup(func() { fwd.Process.Kill(); fwd.Wait() })
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", lport))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	}, 20*time.Second, 100*time.Millisecond)
	assert.Equal(t, "hello-from-sandbox\n", body)
}

func sha(t testing.TB, path string) string {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

func TestSCPAndSFTP50MBAsNonRootAgent(t *testing.T) {
	requireTool(t, "scp", "openssh-client")
	requireTool(t, "sftp", "openssh-client")
	// The image's own servers are absent: sandboxd serves both protocols.
	ts := startServer(t, options{user: "1000:1000", hide: imageFileServers})
	local := t.TempDir()
	src := filepath.Join(local, "src.bin")
	f, err := os.Create(src)
	require.NoError(t, err)
	_, err = io.CopyN(f, rand.Reader, 50<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	want := sha(t, src)
	base := append(ts.sshOpts(ts.agentKey), "-P", ts.port)

	check := func(name string) {
		t.Helper()
		p := filepath.Join(ts.workdir, name)
		assert.Equal(t, want, sha(t, p), name)
		st, err := os.Stat(p)
		require.NoError(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		assert.Equal(t, "1000:1000", fmt.Sprintf("%d:%d", sys.Uid, sys.Gid), "owner of %s", name)
	}
	// scp's SFTP mode (the default of OpenSSH ≥ 9) and the legacy protocol.
	for _, mode := range []struct{ flag, name string }{{"-s", "via-sftp.bin"}, {"-O", "via-legacy.bin"}} {
		r := run(t, exec.Command("scp", append(base, mode.flag, src, "agent@127.0.0.1:"+mode.name)...), "")
		require.Equal(t, 0, r.code, "scp %s up: %s", mode.flag, r.stderr)
		check(mode.name)
		back := filepath.Join(local, "back-"+mode.name)
		r = run(t, exec.Command("scp", append(base, mode.flag, "agent@127.0.0.1:"+mode.name, back)...), "")
		require.Equal(t, 0, r.code, "scp %s down: %s", mode.flag, r.stderr)
		assert.Equal(t, want, sha(t, back))
	}
	// sftp with a batch.
	batch := filepath.Join(local, "batch")
	back := filepath.Join(local, "back-sftp.bin")
	require.NoError(t, os.WriteFile(batch, []byte(fmt.Sprintf("put %s sftp.bin\nget sftp.bin %s\n", src, back)), 0o644))
	sftpArgs := append(ts.sshOpts(ts.agentKey), "-P", ts.port, "-b", batch, "agent@127.0.0.1")
	r := run(t, exec.Command("sftp", sftpArgs...), "")
	require.Equal(t, 0, r.code, r.stderr)
	check("sftp.bin")
	assert.Equal(t, want, sha(t, back))
}

// TestOpenSSHSeesExitStatusBeforeEOF reads OpenSSH's own trace of what it
// received, in order: exit-status, then EOF, then close
// (docs/failures.md#exit-status-before-eof-and-close).
func TestOpenSSHSeesExitStatusBeforeEOF(t *testing.T) {
	requireTool(t, "ssh", "openssh-client")
	ts := startServer(t, options{})
	for _, tty := range []bool{false, true} {
		args := []string{"-vvv", "-o", "LogLevel=DEBUG3"}
		if tty {
			args = append(args, "-tt")
		}
		args = append(args, "agent@127.0.0.1", "seq 1 20000; exit 3")
		r := run(t, ts.ssh(t, args...), "")
		assert.Equal(t, 3, r.code)
		var order []string
		sc := bufio.NewScanner(strings.NewReader(r.stderr))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.Contains(line, "rtype exit-status"):
				order = append(order, "exit-status")
			case strings.Contains(line, "channel 0: rcvd eof"):
				order = append(order, "eof")
			case strings.Contains(line, "channel 0: rcvd close"):
				order = append(order, "close")
			}
		}
		assert.Equal(t, []string{"exit-status", "eof", "close"}, order, "tty=%v", tty)
		assert.True(t, strings.HasSuffix(r.stdout, "20000\n") || strings.HasSuffix(r.stdout, "20000\r\n"), "all output before the status")
	}
}
