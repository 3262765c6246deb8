package sshd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/sshd"
)

func TestExitSignalCarriesTheName(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	out, _, code, sig := output(t, c, "echo before; kill -SEGV $$")
	assert.Equal(t, "before\n", out)
	assert.Equal(t, "SEGV", sig)
	assert.Equal(t, 128+11, code)
}

// TestExitStatusBeforeEOFOnTheRawChannel pins the order on the raw channel:
// by the time the data stream reports EOF, exit-status has already been
// queued (the client's mux handles packets in order), and the request
// stream ends (close) only after it
// (docs/failures.md#exit-status-before-eof-and-close).
func TestExitStatusBeforeEOFOnTheRawChannel(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	for range 20 {
		ch, reqs, err := c.OpenChannel("session", nil)
		require.NoError(t, err)
		ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{"seq 1 5000; exit 7"}))
		require.NoError(t, err)
		require.True(t, ok)
		data, err := io.ReadAll(ch)
		require.NoError(t, err)
		assert.True(t, bytes.HasSuffix(data, []byte("5000\n")))
		select {
		case req := <-reqs:
			require.NotNil(t, req, "request stream closed before exit-status")
			assert.Equal(t, "exit-status", req.Type)
			var st struct{ Status uint32 }
			require.NoError(t, ssh.Unmarshal(req.Payload, &st))
			assert.Equal(t, uint32(7), st.Status)
		default:
			t.Fatal("EOF arrived before exit-status")
		}
		_, open := <-reqs
		assert.False(t, open, "close follows exit-status")
		ch.Close()
	}
}

func TestPTYRequestGivesATerminal(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.RequestPty("xterm-256color", 43, 132, ssh.TerminalModes{ssh.ECHO: 0}))
	out, err := s.Output(`test -t 0 && test -t 1 && echo isatty; stty size; echo "TERM=$TERM"; tty`)
	require.NoError(t, err)
	assert.Regexp(t, `^isatty\r\n43 132\r\nTERM=xterm-256color\r\n/dev/pts/\d+\r\n$`, string(out))
}

func TestDevTTYAndForegroundGroup(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	out, err := s.Output(`exec 3</dev/tty && echo devtty-ok; set -- $(sed 's/.*) //' /proc/self/stat); echo "pgrp=$3 tpgid=$6"`)
	require.NoError(t, err)
	assert.Contains(t, string(out), "devtty-ok")
	var pgrp, tpgid int
	_, err = fmt.Sscanf(string(out[bytes.Index(out, []byte("pgrp=")):]), "pgrp=%d tpgid=%d", &pgrp, &tpgid)
	require.NoError(t, err)
	assert.Equal(t, pgrp, tpgid)
}

func TestWindowChangeNeverEndsInput(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{ssh.ECHO: 0}))
	in, err := s.StdinPipe()
	require.NoError(t, err)
	var out bytes.Buffer
	s.Stdout = &out
	require.NoError(t, s.Start(`while read l; do echo "got $l"; [ "$l" = 99 ] && exit 0; done`))
	for i := range 100 {
		require.NoError(t, s.WindowChange(24+i%20, 80+i))
		fmt.Fprintf(in, "%d\n", i)
	}
	require.NoError(t, s.Wait())
	for i := range 100 {
		assert.Contains(t, out.String(), fmt.Sprintf("got %d\r\n", i))
	}
}

func TestTimeoutDeliversWhatWasPrinted(t *testing.T) {
	ts := startServer(t, options{timeout: 1500 * time.Millisecond})
	c := ts.client(t, ts.agentSign)
	begin := time.Now()
	out, errOut, code, _ := output(t, c, `i=0; while [ $i -lt 1000 ]; do echo line-$i; i=$((i+1)); done; sleep 1000 & sleep 1001`)
	assert.Less(t, time.Since(begin), 10*time.Second)
	assert.Equal(t, 124, code)
	assert.Contains(t, errOut, "session timeout")
	assert.Equal(t, 1000, strings.Count(out, "\n"))
	assert.True(t, strings.HasSuffix(out, "line-999\n"))
	// The whole tree went, not only the leader
	// (docs/failures.md#timeout-kills-the-whole-tree).
	require.Eventually(t, func() bool { return len(sandboxtest.ProcsOf("sleep 100")) == 0 }, 5*time.Second, 20*time.Millisecond,
		"timed-out session left %v", sandboxtest.ProcsOf("sleep 100"))
}

func TestExitStatusesExactUnderLoad(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, code, _ := output(t, c, fmt.Sprintf("sleep 0.0%d; (sleep 0.2 &) ; exit %d", i%10, i))
			assert.Equal(t, i, code)
		}()
	}
	wg.Wait()
}

func TestStdinEOFEndsHeredocs(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	s.Stdin = strings.NewReader(strings.Repeat("abc\n", 50000))
	out, err := s.Output("wc -l; cat")
	require.NoError(t, err)
	assert.Equal(t, "50000\n", string(out))
}

func TestSetupFailureIsReportedWithTheReason(t *testing.T) {
	ts := startServer(t, options{dir: "/no/such/workdir"})
	c := ts.client(t, ts.agentSign)
	_, errOut, code, _ := output(t, c, "true")
	assert.Equal(t, 125, code)
	assert.Contains(t, errOut, "/no/such/workdir")

	// With a pty, the reason arrives on the terminal.
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	out, err := s.Output("true")
	var ee *ssh.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 125, ee.ExitStatus())
	assert.Contains(t, string(out), "/no/such/workdir")
}

func TestCommandNotFoundIsTheShells127(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	_, errOut, code, _ := output(t, c, "no-such-command-here")
	assert.Equal(t, 127, code)
	assert.Contains(t, errOut, "not found")
}

func TestBackgroundProcessSurvivesItsSession(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	begin := time.Now()
	out, _, code, _ := output(t, c, "sleep 300 & echo $!")
	require.Equal(t, 0, code)
	assert.Less(t, time.Since(begin), 3*time.Second, "the session waited for its background child")
	pid := strings.TrimSpace(out)
	time.Sleep(300 * time.Millisecond)
	_, _, code, _ = output(t, c, "kill -0 "+pid+" && echo alive")
	assert.Equal(t, 0, code, "the background process died with its session")
}

func TestDisconnectKillsTheSessionGroup(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	out, err := s.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.Start("sleep 1234 & echo ready; sleep 1235"))
	buf := make([]byte, 6)
	_, err = io.ReadFull(out, buf)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(sandboxtest.ProcsOf("sleep 123")) == 2 }, 5*time.Second, 10*time.Millisecond)
	c.Close()
	require.Eventually(t, func() bool { return len(sandboxtest.ProcsOf("sleep 123")) == 0 }, 10*time.Second, 20*time.Millisecond)
}

func TestSignalRequestReachesTheGroup(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	out, err := s.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.Start(`trap 'echo got-usr1; exit 9' USR1; echo ready; while :; do sleep 0.05; done`))
	buf := make([]byte, 6)
	_, err = io.ReadFull(out, buf)
	require.NoError(t, err)
	require.NoError(t, s.Signal(ssh.SIGUSR1))
	rest, _ := io.ReadAll(out)
	assert.Contains(t, string(rest), "got-usr1")
	var ee *ssh.ExitError
	require.ErrorAs(t, s.Wait(), &ee)
	assert.Equal(t, 9, ee.ExitStatus())
}

func TestEnvRequestsAllowlist(t *testing.T) {
	ts := startServer(t, options{acceptEnv: []string{"AGENT_*"}})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	assert.NoError(t, s.Setenv("LC_ALL", "C"))
	assert.NoError(t, s.Setenv("LANG", "en_US.UTF-8"))
	assert.NoError(t, s.Setenv("AGENT_MODE", "fast"))
	assert.Error(t, s.Setenv("LD_PRELOAD", "/tmp/x.so"))
	assert.Error(t, s.Setenv("PATH", "/tmp"))
	out, err := s.Output("env")
	require.NoError(t, err)
	env := string(out)
	assert.Contains(t, env, "LC_ALL=C\n")
	assert.Contains(t, env, "LANG=en_US.UTF-8\n")
	assert.Contains(t, env, "AGENT_MODE=fast\n")
	assert.NotContains(t, env, "LD_PRELOAD")
	assert.NotContains(t, env, "SSH_")
	assert.NotContains(t, env, "SANDBOXD")
	assert.Contains(t, env, "PATH=/usr/local/sbin")
}

func TestHarnessKeyRunsOnlyControlCommands(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.harnessSig)
	out, _, code, _ := output(t, c, "status")
	assert.Equal(t, 0, code)
	assert.Equal(t, "{\"phase\":\"agent\"}\n", out)
	_, errOut, code, _ := output(t, c, "bash -c id")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "not a control command")

	s, err := c.NewSession()
	require.NoError(t, err)
	assert.Error(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	assert.Error(t, s.Shell())
	s.Close()

	_, err = c.Dial("tcp", "127.0.0.1:22")
	assert.ErrorContains(t, err, "harness key cannot forward")
	ts.harnessLog.mu.Lock()
	defer ts.harnessLog.mu.Unlock()
	assert.Equal(t, []string{"status", "bash -c id"}, ts.harnessLog.calls)
}

func TestUnknownKeyIsRefused(t *testing.T) {
	ts := startServer(t, options{})
	_, stranger := newKey(t, t.TempDir(), "stranger")
	_, err := ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{
		User: "agent", Auth: []ssh.AuthMethod{ssh.PublicKeys(stranger)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second,
	})
	assert.ErrorContains(t, err, "unable to authenticate")
}

func TestFromOptionIsHonoured(t *testing.T) {
	ts := startServer(t, options{agentKeyOpt: `from="10.0.0.0/8,!127.0.0.1"`})
	_, err := ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{
		User: "agent", Auth: []ssh.AuthMethod{ssh.PublicKeys(ts.agentSign)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second,
	})
	assert.ErrorContains(t, err, "unable to authenticate")

	ts = startServer(t, options{agentKeyOpt: `from="127.0.0.*",no-pty`})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	assert.Error(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}), "no-pty is honoured")
}

func TestParseAuthorizedKeys(t *testing.T) {
	_, a := newKey(t, t.TempDir(), "a")
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(a.PublicKey())))
	data := strings.Join([]string{
		"# comment",
		line + " plain",
		`from="192.168.1.0/24,*.example" ` + line + " from",
		`restrict,pty ` + line + " restricted",
		`command="/bin/date" ` + line + " forced",
		`environment="A=B" ` + line,
		`from="300.1.1.0/99" ` + line,
		"not a key",
		"",
	}, "\n")
	keys, refused := sshd.ParseAuthorizedKeys([]byte(data))
	require.Len(t, keys, 3)
	assert.Equal(t, 2, keys[0].Line)
	assert.Equal(t, []string{"192.168.1.0/24", "*.example"}, keys[1].From)
	assert.False(t, keys[2].NoPTY)
	assert.True(t, keys[2].NoPortForwarding)
	require.Len(t, refused, 4)
	var lines []int
	for _, e := range refused {
		var kle *sshd.KeyLineError
		require.ErrorAs(t, e, &kle)
		lines = append(lines, kle.Line)
	}
	assert.Equal(t, []int{5, 6, 7, 8}, lines)
	assert.ErrorContains(t, refused[0], `"command"`)
}

func TestHostAndAgentKeysPersist(t *testing.T) {
	dir := t.TempDir()
	a, err := sshd.LoadOrCreateHostKey(filepath.Join(dir, "keys", "host"))
	require.NoError(t, err)
	b, err := sshd.LoadOrCreateHostKey(filepath.Join(dir, "keys", "host"))
	require.NoError(t, err)
	assert.Equal(t, a.PublicKey().Marshal(), b.PublicKey().Marshal())
	st, err := os.Stat(filepath.Join(dir, "keys", "host"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	k1, err := sshd.GenerateAgentKey(dir)
	require.NoError(t, err)
	k2, err := sshd.GenerateAgentKey(dir)
	require.NoError(t, err)
	assert.Equal(t, k1.Public.Marshal(), k2.Public.Marshal())
	_, err = ssh.ParsePrivateKey(k1.Private)
	require.NoError(t, err)
	pub, err := os.ReadFile(k1.PrivatePath + ".pub")
	require.NoError(t, err)
	keys, refused := sshd.ParseAuthorizedKeys(pub)
	require.Empty(t, refused)
	assert.Equal(t, k1.Public.Marshal(), keys[0].Key.Marshal())
}

func TestGlobalRequests(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	ok, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, _, err = c.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"127.0.0.1", 0}))
	require.NoError(t, err)
	assert.False(t, ok)
	ok, _, err = c.SendRequest("made-up@example.com", true, nil)
	require.NoError(t, err)
	assert.False(t, ok)

	_, _, err = c.OpenChannel("x11", nil)
	assert.ErrorContains(t, err, "not served by sandboxd")

	// no-more-sessions: the session already open keeps working, new ones
	// are refused.
	s, err := c.NewSession()
	require.NoError(t, err)
	_, _, err = c.SendRequest("no-more-sessions@openssh.com", false, nil)
	require.NoError(t, err)
	out, err := s.Output("echo still")
	require.NoError(t, err)
	assert.Equal(t, "still\n", string(out))
	_, err = c.NewSession()
	assert.ErrorContains(t, err, "no more sessions")
}

func TestDirectTCPIPRefusalsCarryTheReason(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	_, err := c.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	assert.ErrorContains(t, err, "nothing listens")
	_, err = c.Dial("tcp", "no-such-host.invalid:80")
	assert.ErrorContains(t, err, "cannot resolve")
}

func TestUnknownSubsystemIsRefused(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	var errb bytes.Buffer
	s.Stderr = &errb
	assert.Error(t, s.RequestSubsystem("netconf"))
}

func TestRecordings(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	_, _, code, _ := output(t, c, "echo recorded; exit 4")
	require.Equal(t, 4, code)

	s, err := c.NewSession()
	require.NoError(t, err)
	require.NoError(t, s.RequestPty("xterm", 30, 100, ssh.TerminalModes{}))
	_, err = s.Output("printf 'héllo wörld\\n'; printf '\\xe2\\x82'; sleep 0.1; printf '\\xac\\n'")
	require.NoError(t, err)
	s.Close()

	var recs []sshd.Record
	require.Eventually(t, func() bool {
		recs, err = sshd.ReadRecords(ts.recordsDir)
		return err == nil && len(recs) == 2
	}, 5*time.Second, 20*time.Millisecond)
	exec0 := recs[0]
	assert.Equal(t, "exec", exec0.Kind)
	assert.Equal(t, "echo recorded; exit 4", exec0.Command)
	assert.Equal(t, 4, exec0.Exit)
	assert.Equal(t, uint32(1000), exec0.UID)
	assert.Equal(t, int64(len("recorded\n")), exec0.BytesOut)
	assert.Equal(t, "agent", exec0.Login)
	assert.False(t, exec0.End.Before(exec0.Start))

	ptyRec := recs[1]
	require.True(t, ptyRec.PTY)
	require.NotEmpty(t, ptyRec.Cast)
	raw, err := os.ReadFile(filepath.Join(ts.recordsDir, ptyRec.Cast))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var hdr struct {
		Version       int `json:"version"`
		Width, Height int
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &hdr))
	assert.Equal(t, 2, hdr.Version)
	assert.Equal(t, 100, hdr.Width)
	assert.Equal(t, 30, hdr.Height)
	var text strings.Builder
	for _, l := range lines[1:] {
		var ev []any
		require.NoError(t, json.Unmarshal([]byte(l), &ev))
		if ev[1] == "o" {
			text.WriteString(ev[2].(string))
		}
	}
	assert.Equal(t, "héllo wörld\r\n€\r\n", text.String(), "UTF-8 split across chunks is kept whole")
	if _, err := exec.LookPath("asciinema"); err == nil {
		// asciinema wants a terminal of its own.
		f, err := pty.Start(exec.Command("asciinema", "cat", filepath.Join(ts.recordsDir, ptyRec.Cast)))
		require.NoError(t, err)
		out, _ := io.ReadAll(f)
		f.Close()
		assert.Contains(t, string(out), "héllo wörld")
	}
	st, err := os.Stat(filepath.Join(ts.recordsDir, "sessions.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

func TestSessionsAreListed(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	out, err := s.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.Start("echo go; sleep 5"))
	io.ReadFull(out, make([]byte, 3))
	list := ts.srv.Sessions()
	require.Len(t, list, 1)
	assert.Equal(t, "echo go; sleep 5", list[0].Command)
	s.Signal(ssh.SIGKILL)
}

func TestShutdownWaitsForSessionsThenCloses(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	out, err := s.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.Start("echo go; sleep 0.5; echo done"))
	io.ReadFull(out, make([]byte, 3))
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	require.NoError(t, ts.srv.Shutdown(ctx))
	rest, _ := io.ReadAll(out)
	assert.Equal(t, "done\n", string(rest), "the running session finished")
	_, err = ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{User: "a", Auth: []ssh.AuthMethod{ssh.PublicKeys(ts.agentSign)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: time.Second})
	assert.Error(t, err, "no new connections after Shutdown")
}

// TestSFTPWithoutAnImageServer: the subsystem is served on an image
// without OpenSSH's sftp-server, and ends with an exit status, as sshd's.
func TestSFTPWithoutAnImageServer(t *testing.T) {
	ts := startServer(t, options{hide: imageFileServers})
	c := ts.client(t, ts.agentSign)
	ch, reqs, err := c.OpenChannel("session", nil)
	require.NoError(t, err)
	defer ch.Close()
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{"sftp"}))
	require.NoError(t, err)
	require.True(t, ok)
	// Closing the client sends EOF, as OpenSSH's sftp does, and the server
	// answers with the status before it closes.
	client, err := sftp.NewClientPipe(ch, eofOnClose{ch})
	require.NoError(t, err)
	wd, err := client.Getwd()
	require.NoError(t, err)
	assert.Equal(t, ts.workdir, wd, "sftp starts in the agent's working directory")
	require.NoError(t, client.Mkdir("made"))
	st, err := client.Stat("made")
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	require.NoError(t, client.Close())
	req := <-reqs
	require.NotNil(t, req)
	assert.Equal(t, "exit-status", req.Type)
	assert.Equal(t, ssh.Marshal(struct{ Status uint32 }{0}), req.Payload)
}

// eofOnClose closes a channel's writing side only.
type eofOnClose struct{ ssh.Channel }

func (c eofOnClose) Close() error { return c.CloseWrite() }

func TestBreakRequest(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	out, err := s.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.Start("echo ready; sleep 5"))
	io.ReadFull(out, make([]byte, 5))
	ok, err := s.SendRequest("break", true, ssh.Marshal(struct{ Ms uint32 }{100}))
	require.NoError(t, err)
	assert.True(t, ok, "break on a terminal is accepted, as sshd does")
	s.Signal(ssh.SIGKILL)

	// Without a terminal there is nothing to break.
	s2, err := c.NewSession()
	require.NoError(t, err)
	defer s2.Close()
	out2, _ := s2.StdoutPipe()
	require.NoError(t, s2.Start("echo ready; sleep 5"))
	io.ReadFull(out2, make([]byte, 5))
	ok, err = s2.SendRequest("break", true, ssh.Marshal(struct{ Ms uint32 }{100}))
	require.NoError(t, err)
	assert.False(t, ok)
	s2.Signal(ssh.SIGKILL)
}

// TestSandboxCannotReachTheSSHPort: the listener lives in the substrate's
// network; the sandbox has a network of its own.
func TestSandboxCannotReachTheSSHPort(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	_, _, code, _ := output(t, c, fmt.Sprintf("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", %s), timeout=2)'", ts.port))
	assert.NotEqual(t, 0, code, "a sandboxed process reached the SSH port")
}

// The three packets that end a session leave in one TCP segment
// (docs/failures.md#a-sessions-end-leaves-in-one-segment): counted on the
// client's socket, between the exec's reply and the channel's close.
func TestSessionEndLeavesInOneSegment(t *testing.T) {
	ts := startServer(t, options{})
	c, nc := dialRaw(t, ts)
	t.Cleanup(func() { c.Close() })
	raw, err := nc.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	segmentsIn := func() uint32 {
		var info *unix.TCPInfo
		var gerr error
		require.NoError(t, raw.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }))
		require.NoError(t, gerr)
		return info.Data_segs_in
	}
	// A goroutine descheduled past corkAtMost, or a client that reads its
	// count only after the command is over, makes a session count 2 or 0
	// on a loaded machine; without the cork every session counts 3.
	const sessions = 10
	var counts []uint32
	inOne := 0
	for range sessions {
		ch, reqs, err := c.OpenChannel("session", nil)
		require.NoError(t, err)
		ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{"exit 3"}))
		require.NoError(t, err)
		require.True(t, ok)
		before := segmentsIn()
		var got []string
		for req := range reqs {
			got = append(got, req.Type)
		}
		_, err = io.ReadAll(ch)
		require.NoError(t, err)
		n := segmentsIn() - before
		assert.Equal(t, []string{"exit-status"}, got)
		counts = append(counts, n)
		if n == 1 {
			inOne++
		}
		ch.Close()
	}
	assert.GreaterOrEqual(t, inOne, sessions*7/10, "data segments from the server between each exec's reply and its close: %v", counts)
}
