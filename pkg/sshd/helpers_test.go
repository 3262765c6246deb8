package sshd_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/sshd"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// testServer is a real sandbox with the SSH server in front of it.
type testServer struct {
	sb         *sandboxtest.Sandbox
	srv        *sshd.Server
	addr       string
	port       string
	workdir    string // the agent's working directory, owned by the agent
	recordsDir string
	agentKey   string // private key file for OpenSSH clients
	agentSign  ssh.Signer
	harnessKey string
	harnessSig ssh.Signer
	harnessLog *harnessCalls
	agentUser  idmap.User
}

type harnessCalls struct {
	mu    sync.Mutex
	calls []string
}

type options struct {
	user        string // Docker-style agent user; default 1000:1000
	timeout     time.Duration
	agentKeyOpt string // authorized_keys options for the agent key
	dir         string // override the agent's working directory
	acceptEnv   []string
	maxSessions int
	handshake   time.Duration
	hide        []string // paths absent inside the sandbox
	shell       string   // the agent's login shell instead of its passwd entry's
	// prepare runs once the sandbox exists, before the server is made: what
	// it leaves is what the server finds at start.
	prepare func(sb *sandboxtest.Sandbox)
}

// newKey writes an ed25519 private key usable by OpenSSH and returns its
// path and signer.
func newKey(t testing.TB, dir, name string) (string, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, name)
	require.NoError(t, err)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(block), 0o600))
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	return p, signer
}

func startServer(t testing.TB, o options) *testServer {
	t.Helper()
	if o.user == "" {
		o.user = "1000:1000"
	}
	// The agent must be able to reach its workdir: t.TempDir's parent is
	// private to root.
	work, err := os.MkdirTemp("", "sandboxd-sshd-work-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	require.NoError(t, os.Chmod(work, 0o755))
	u, err := idmap.Lookup("/", o.user)
	require.NoError(t, err)
	require.NoError(t, os.Chown(work, int(u.UID), int(u.GID)))
	if o.shell != "" {
		u.Shell = o.shell
	}

	sb := sandboxtest.Start(t, bwrap.Config{Workdir: work, Hide: o.hide})
	if o.prepare != nil {
		o.prepare(sb)
	}
	keys := t.TempDir()
	ts := &testServer{sb: sb, workdir: work, recordsDir: filepath.Join(keys, "records"), harnessLog: &harnessCalls{}, agentUser: u}
	ts.agentKey, ts.agentSign = newKey(t, keys, "agent")
	ts.harnessKey, ts.harnessSig = newKey(t, keys, "harness")
	hostKey, err := sshd.LoadOrCreateHostKey(filepath.Join(keys, "host_ed25519"))
	require.NoError(t, err)

	agentLine := string(ssh.MarshalAuthorizedKey(ts.agentSign.PublicKey()))
	if o.agentKeyOpt != "" {
		agentLine = o.agentKeyOpt + " " + agentLine
	}
	agentKeys, refused := sshd.ParseAuthorizedKeys([]byte(agentLine))
	require.Empty(t, refused)
	harnessKeys, refused := sshd.ParseAuthorizedKeys(ssh.MarshalAuthorizedKey(ts.harnessSig.PublicKey()))
	require.Empty(t, refused)

	dir := work
	if o.dir != "" {
		dir = o.dir
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() && os.Getenv("SSHD_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv, err := sshd.New(sshd.Config{
		Target: sb.Target,
		Agent: func() (sshd.Agent, error) {
			return sshd.Agent{User: u, Dir: dir, Env: []string{"PATH=" + childproc.DefaultPath, "HOME=" + u.Home, "LANG=C.UTF-8"}}, nil
		},
		HostKey:            hostKey,
		AgentKeys:          agentKeys,
		HarnessKeys:        harnessKeys,
		AcceptEnv:          o.acceptEnv,
		RecordsDir:         ts.recordsDir,
		SessionTimeout:     o.timeout,
		MaxSessionsPerConn: o.maxSessions,
		HandshakeTimeout:   o.handshake,
		Harness: func(ctx context.Context, command string, stdout, stderr io.Writer) int {
			ts.harnessLog.mu.Lock()
			ts.harnessLog.calls = append(ts.harnessLog.calls, command)
			ts.harnessLog.mu.Unlock()
			switch command {
			case "status":
				fmt.Fprintln(stdout, `{"phase":"agent"}`)
				return 0
			default:
				fmt.Fprintf(stderr, "sandboxd: %q is not a control command (status, grade, stop, keys)\n", command)
				return 2
			}
		},
		Log: log,
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts.srv = srv
	ts.addr = ln.Addr().String()
	_, ts.port, _ = net.SplitHostPort(ts.addr)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		srv.Close()
		require.ErrorIs(t, <-served, sshd.ErrServerClosed)
	})
	return ts
}

// sshOpts are the OpenSSH client options every test uses.
func (ts *testServer) sshOpts(key string) []string {
	return []string{
		"-F", "/dev/null",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
		"-i", key,
	}
}

// ssh runs the OpenSSH client with args against the server.
func (ts *testServer) ssh(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	all := append(ts.sshOpts(ts.agentKey), "-p", ts.port)
	all = append(all, args...)
	return exec.Command("ssh", all...)
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t testing.TB, cmd *exec.Cmd, stdin string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	// A client that moves the 1 GiB files (SANDBOXD_TEST_1GIB=1) four
	// times over, paramiko's pure-Python SFTP among them, takes minutes.
	bound := 60 * time.Second
	if transferSize() > 64<<20 {
		bound = 15 * time.Minute
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(bound):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v hung; stdout %q stderr %q", cmd.Args, out.String(), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// client dials the server with the Go client.
func (ts *testServer) client(t testing.TB, signer ssh.Signer) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{
		User:            "agent",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// output runs cmd in a fresh session of c and returns stdout, stderr and the
// exit code (-1 with the signal name for a signal).
func output(t testing.TB, c *ssh.Client, cmd string) (string, string, int, string) {
	t.Helper()
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(cmd)
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0, ""
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitStatus(), ee.Signal()
	default:
		t.Fatalf("run %q: %v (stderr %q)", cmd, err, errb.String())
		return "", "", 0, ""
	}
}

func requireTool(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(path); err != nil {
		sandboxtest.Need(t, fmt.Sprintf("%s (apt-get install %s)", path, pkg))
	}
}

// freePort finds a free loopback port for a client-side listener.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func sandboxID(t testing.TB, ts *testServer) string {
	return fmt.Sprintf("%d:%d", ts.agentUser.UID, ts.agentUser.GID)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// imageFileServers are OpenSSH's file servers, hidden from a sandbox's view
// so that it is an image without openssh-sftp-server or openssh-client.
var imageFileServers = []string{"/usr/lib/openssh", "/usr/bin/scp", "/usr/bin/sftp"}
