package attack

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// sshClient logs in with the rollout's generated agent key, as a harness's
// agent driver would.
func (r *rollout) sshClient(t *testing.T) *ssh.Client {
	t.Helper()
	signer, err := ssh.ParsePrivateKey(r.agentKey)
	require.NoError(t, err)
	return sandboxtest.DialSSH(t, r.sshAddr, signer)
}

// responsive records that, while the agent does its worst, the daemon
// still starts a new session promptly and grades genuinely.
func (r *rollout) responsive(t *testing.T, what string) {
	t.Helper()
	start := time.Now()
	x := r.exec(control.Request{Argv: []string{"/bin/sh", "-c", "echo alive"}}, 30*time.Second)
	took := time.Since(start)
	ok := x.err == nil && x.stdout == "alive\n" && took < 15*time.Second
	record(t, what+": a new session still starts", ok, fmt.Sprintf("took %s: %v %q", took, x.err, x.output()))
	v := r.grade(t, 2*time.Minute)
	record(t, what+": grading still works", genuine(v, r.testsSecret), fmt.Sprintf("%+v", v))
}

func TestEscape_DisturbHarness(t *testing.T) {
	requireTools(t, "/usr/bin/python3", "dd", "yes")
	forAgents(t, rolloutOptions{workdirMB: 16}, func(t *testing.T, agent string, r *rollout) {
		base := sandboxtest.RSSMiB()

		t.Run("kill every visible process", func(t *testing.T) {
			r.sh(`setsid sleep 600 </dev/null >/dev/null 2>&1 &`)
			x := r.sh(`kill -9 -1; for p in /proc/[0-9]*; do n=${p#/proc/}; [ "$n" = $$ ] || kill -9 $n; done 2>/dev/null; kill -9 1; kill -TERM 1; kill -HUP 1; true`)
			require.NoError(t, x.err)
			r.responsive(t, "kill -9 every visible process, pid 1 included")
		})

		t.Run("fill the workdir", func(t *testing.T) {
			x := r.sh(r.expand(`dd if=/dev/zero of={WD}/fill bs=1M 2>&1; df -k {WD} | tail -1`, nil))
			require.NoError(t, x.err)
			require.Contains(t, x.output(), "No space left", "the workdir filled up")
			r.responsive(t, "fill the workdir's disk")
			r.sh(r.expand(`rm -f {WD}/fill`, nil))
		})

		t.Run("fork bomb", func(t *testing.T) {
			// Bounded: this machine's pid space is shared (see
			// docs/security.md on pid limits).
			x := r.sh(r.expand(`cat > {WD}/bomb.sh <<'BOMB'
bomb() { if [ $1 -le 0 ]; then exec sleep 300; fi; bomb $(($1-1)) & bomb $(($1-1)) & wait; }
bomb 9
BOMB
setsid sh {WD}/bomb.sh </dev/null >/dev/null 2>&1 &
echo started`, nil))
			require.NoError(t, x.err)
			// It grows at the pace of the machine: wait until it is grown.
			var n int
			deadline := time.Now().Add(90 * time.Second)
			for n <= 900 && time.Now().Before(deadline) {
				time.Sleep(time.Second)
				y := r.sh(`ls -d /proc/[0-9]* | wc -l`)
				n, _ = strconv.Atoi(strings.TrimSpace(y.stdout))
			}
			t.Logf("%d processes in the sandbox", n)
			require.Greater(t, n, 500, x.output())
			r.responsive(t, fmt.Sprintf("fork bomb (%d processes)", n))
			r.sh(`kill -9 -1; true`)
		})

		t.Run("exhaust file descriptors", func(t *testing.T) {
			x := r.sh(r.expand(`setsid {PY} fds 100000 60 > {WD}/fds.log 2>&1 </dev/null & for i in $(seq 120); do grep -q holding {WD}/fds.log && break; sleep 0.5; done; cat {WD}/fds.log`, nil))
			require.NoError(t, x.err)
			require.Contains(t, x.stdout, "holding", x.output())
			t.Logf("%s", strings.TrimSpace(x.stdout))
			r.responsive(t, "exhaust file descriptors ("+strings.TrimSpace(x.stdout)+")")
			r.sh(`kill -9 -1; true`)
		})

		t.Run("flood the pty", func(t *testing.T) {
			c := r.sshClient(t)
			sess, err := c.NewSession()
			require.NoError(t, err)
			require.NoError(t, sess.RequestPty("xterm", 50, 200, ssh.TerminalModes{}))
			out, err := sess.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, sess.Start(`yes "$(head -c 1000 /dev/zero | tr '\0' A)"`))
			// Read a little, then stop reading: the flood backs up into the
			// daemon, which must neither hoard it nor stall.
			io.CopyN(io.Discard, out, 1<<20)
			before := sandboxtest.RSSMiB()
			r.responsive(t, "flood a pty the client does not read")
			grew := sandboxtest.RSSMiB() - before
			record(t, "flood a pty: the daemon's memory stays bounded", grew < 256, fmt.Sprintf("RSS grew %d MiB", grew))
			// A reading client gets the flood at speed, and others are served.
			done := make(chan int64)
			go func() { n, _ := io.Copy(io.Discard, out); done <- n }()
			time.Sleep(2 * time.Second)
			r.responsive(t, "flood a pty the client reads")
			sess.Close()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("the flooding session did not end when its client left")
			}
		})

		t.Run("flood a non-pty exec", func(t *testing.T) {
			conn, nc, err := r.client.Dial(context.Background(), control.Request{Op: "exec", Argv: []string{"/bin/sh", "-c", "cat /dev/zero"}})
			require.NoError(t, err)
			defer nc.Close()
			_ = conn
			// Never read: the stream backs up.
			time.Sleep(time.Second)
			before := sandboxtest.RSSMiB()
			r.responsive(t, "flood an exec stream the client does not read")
			record(t, "flood an exec stream: the daemon's memory stays bounded", sandboxtest.RSSMiB()-before < 256, fmt.Sprintf("RSS grew %d MiB", sandboxtest.RSSMiB()-before))
			nc.Close()
		})

		t.Run("connect to the proxy and say nothing, many times", func(t *testing.T) {
			x := r.sh(r.expand(`setsid /usr/bin/python3 -c '
import socket, time
held = []
for i in range(2000):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), 2); s.send(b"CONNECT a"); held.append(s)
    except OSError as e:
        print("stopped at", i, e); break
print("holding", len(held), flush=True)
time.sleep(60)' > {WD}/loris.log 2>&1 </dev/null & for i in $(seq 120); do grep -q holding {WD}/loris.log && break; sleep 0.5; done; cat {WD}/loris.log`, nil))
			require.NoError(t, x.err)
			t.Logf("%s", strings.TrimSpace(x.stdout))
			r.responsive(t, "slow-loris the agent proxy ("+strings.TrimSpace(x.stdout)+")")
			r.sh(`kill -9 -1; true`)
		})
		t.Logf("RSS: %d MiB at the start, %d MiB at the end", base, sandboxtest.RSSMiB())
	})
}
