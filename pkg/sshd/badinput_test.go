package sshd_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// baseline is what the test process holds: descriptors, goroutines, and
// processes below it (the holder and the sandbox's own).
type baseline struct {
	fds, goroutines, procs int
}

func measure() baseline {
	fds, _ := os.ReadDir("/proc/self/fd")
	return baseline{fds: len(fds), goroutines: runtime.NumGoroutine(), procs: len(join.Descendants(os.Getpid()))}
}

func dialRaw(t *testing.T, ts *testServer) (*ssh.Client, net.Conn) {
	t.Helper()
	nc, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	cc, chans, reqs, err := ssh.NewClientConn(nc, ts.addr, &ssh.ClientConfig{
		User: "agent", Auth: []ssh.AuthMethod{ssh.PublicKeys(ts.agentSign)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
	})
	require.NoError(t, err)
	return ssh.NewClient(cc, chans, reqs), nc
}

func ptyPayload(cols, rows uint32) []byte {
	return ssh.Marshal(struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}{"xterm", cols, rows, 0, 0, ""})
}

func TestBadInputLeavesNoTrace(t *testing.T) {
	ts := startServer(t, options{handshake: time.Second})

	// A bystander session on its own connection must not notice anything.
	by := ts.client(t, ts.agentSign)
	bys, err := by.NewSession()
	require.NoError(t, err)
	byIn, _ := bys.StdinPipe()
	byOut, _ := bys.StdoutPipe()
	require.NoError(t, bys.Start("cat"))
	byLines := bufio.NewReader(byOut)
	echo := func(s string) {
		t.Helper()
		fmt.Fprintln(byIn, s)
		line, err := byLines.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, s+"\n", line)
	}
	echo("before")

	// Warm up what is allocated once (the executable opened for joins,
	// the runtime's own goroutines), then take the baseline.
	warm := ts.client(t, ts.agentSign)
	output(t, warm, "true")
	warm.Close()
	time.Sleep(200 * time.Millisecond)
	base := measure()

	t.Run("pty 0x0 and 100000x100000", func(t *testing.T) {
		c := ts.client(t, ts.agentSign)
		for _, tc := range []struct {
			cols, rows uint32
			want       string
		}{{0, 0, "0 0"}, {100000, 100000, "2048 4096"}} {
			s, err := c.NewSession()
			require.NoError(t, err)
			ok, err := s.SendRequest("pty-req", true, ptyPayload(tc.cols, tc.rows))
			require.NoError(t, err)
			require.True(t, ok)
			out, err := s.Output("stty size")
			require.NoError(t, err)
			assert.Equal(t, tc.want+"\r\n", string(out))
			s.Close()
		}
		c.Close()
	})

	t.Run("1 MB command", func(t *testing.T) {
		c, _ := dialRaw(t, ts)
		defer c.Close()
		s, err := c.NewSession()
		require.NoError(t, err)
		err = s.Run("echo " + strings.Repeat("x", 1<<20))
		// The packet is over the protocol's limit: the connection ends.
		assert.Error(t, err)
		// A command the kernel cannot exec (one argument over 128 KiB) is a
		// setup error with its reason, on a connection that survives.
		c2 := ts.client(t, ts.agentSign)
		_, errOut, code, _ := output(t, c2, "echo "+strings.Repeat("y", 200<<10))
		assert.Equal(t, 126, code)
		assert.Contains(t, errOut, "argument list too long")
		c2.Close()
	})

	t.Run("10000 env requests", func(t *testing.T) {
		c := ts.client(t, ts.agentSign)
		s, err := c.NewSession()
		require.NoError(t, err)
		accepted := 0
		for i := range 10000 {
			if s.Setenv(fmt.Sprintf("LC_X%d", i), "v") == nil {
				accepted++
			}
		}
		assert.Equal(t, 256, accepted)
		out, err := s.Output("env | grep -c ^LC_X")
		require.NoError(t, err)
		assert.Equal(t, "256\n", string(out))
		c.Close()
	})

	t.Run("unknown subsystem and channel type", func(t *testing.T) {
		c := ts.client(t, ts.agentSign)
		s, err := c.NewSession()
		require.NoError(t, err)
		assert.Error(t, s.RequestSubsystem("no-such"))
		s.Close()
		_, _, err = c.OpenChannel("auth-agent@openssh.com", nil)
		var oce *ssh.OpenChannelError
		require.ErrorAs(t, err, &oce)
		assert.Equal(t, ssh.UnknownChannelType, oce.Reason)
		c.Close()
	})

	t.Run("1000 channels on one connection", func(t *testing.T) {
		c := ts.client(t, ts.agentSign)
		var mu sync.Mutex
		var chans []ssh.Channel
		refused := 0
		var wg sync.WaitGroup
		for range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch, reqs, err := c.OpenChannel("session", nil)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					var oce *ssh.OpenChannelError
					if errors.As(err, &oce) && oce.Reason == ssh.ResourceShortage {
						refused++
					}
					return
				}
				go ssh.DiscardRequests(reqs)
				chans = append(chans, ch)
			}()
		}
		wg.Wait()
		assert.Equal(t, 64, len(chans))
		assert.Equal(t, 1000-64, refused)
		for _, ch := range chans {
			ch.Close()
		}
		c.Close()
	})

	t.Run("client vanishes mid-output", func(t *testing.T) {
		for _, withPTY := range []bool{false, true} {
			c, nc := dialRaw(t, ts)
			s, err := c.NewSession()
			require.NoError(t, err)
			if withPTY {
				require.NoError(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
			}
			out, _ := s.StdoutPipe()
			require.NoError(t, s.Start("yes vanish"))
			io.ReadFull(out, make([]byte, 100000))
			nc.Close() // no SSH goodbye: the TCP connection just ends
			c.Close()
		}
		require.Eventually(t, func() bool { return len(sandboxtest.ProcsOf("yes vanish")) == 0 }, 10*time.Second, 20*time.Millisecond)
	})

	t.Run("unknown key and silent connection", func(t *testing.T) {
		_, stranger := newKey(t, t.TempDir(), "stranger")
		_, err := ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{
			User: "agent", Auth: []ssh.AuthMethod{ssh.PublicKeys(stranger)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		})
		assert.Error(t, err)
		nc, err := net.Dial("tcp", ts.addr)
		require.NoError(t, err)
		nc.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		// The server answers with its version and hangs up once the
		// handshake timeout has passed.
		b, _ := io.ReadAll(nc)
		assert.True(t, strings.HasPrefix(string(b), "SSH-2.0-sandboxd"), "%q", b)
		nc.Close()
	})

	// More than the baseline is a trace; fewer is what an earlier test of
	// the package left, ending meanwhile.
	left := func(b baseline) bool {
		return b.fds > base.fds || b.goroutines > base.goroutines || b.procs > base.procs
	}
	now := measure()
	for deadline := time.Now().Add(15 * time.Second); left(now) && time.Now().Before(deadline); now = measure() {
		time.Sleep(50 * time.Millisecond)
	}
	if left(now) {
		buf := make([]byte, 1<<20)
		t.Fatalf("baseline %+v, now %+v\n%s", base, now, buf[:runtime.Stack(buf, true)])
	}
	echo("after")
}
