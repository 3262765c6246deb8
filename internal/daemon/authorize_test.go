package daemon

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// keyPair is a fresh ed25519 key made by ssh-keygen: its private key file
// (for ssh -i) and its public line.
func keyPair(t *testing.T, dir, name string) (file, pub string) {
	t.Helper()
	file = filepath.Join(dir, name)
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", file).CombinedOutput()
	require.NoError(t, err, "ssh-keygen: %s", out)
	b, err := os.ReadFile(file + ".pub")
	require.NoError(t, err)
	return file, strings.TrimSpace(string(b))
}

// openssh runs OpenSSH's ssh against the door at port with key, and
// returns its output and error.
func openssh(t *testing.T, port, key string, command ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"-F", "/dev/null", "-i", key, "-p", port, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"agent@127.0.0.1", "--"}, command...)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ssh", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestKeysAuthorizeAfterStart: a serve that started without its trial's
// agent key (a warm pool's Pod) takes it over either door, without a
// restart, and OpenSSH then logs in with it; what must never become an
// agent key is refused whole
// (docs/failures.md#a-warm-sandbox-takes-its-trials-key-after-the-claim).
func TestKeysAuthorizeAfterStart(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		sandboxtest.Need(t, "OpenSSH's ssh and ssh-keygen (apt-get install openssh-client)")
	}
	dir := t.TempDir()
	harnessKey, harnessPub := keyPair(t, dir, "harness")
	agent1, agent1Pub := keyPair(t, dir, "agent1")
	agent2, agent2Pub := keyPair(t, dir, "agent2")
	s := serveForTest(t, config.Config{HostMode: true, SSH: config.SSH{Listen: "127.0.0.1:0", HarnessKeys: []byte(harnessPub + "\n")}})
	_, port, _ := strings.Cut(s.d.ssh.listener.Addr().String(), "127.0.0.1:")

	out, err := openssh(t, port, agent1, "echo", "in")
	require.Error(t, err, "before it is authorized the key is refused: %s", out)

	// The control socket (kubectl exec … sandboxd keys --authorize).
	var res Keys
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "keys", Authorize: agent1Pub + "\n"}, &res))
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(agent1Pub))
	require.NoError(t, err)
	assert.Equal(t, []string{ssh.FingerprintSHA256(pk)}, res.Authorized)
	assert.Empty(t, res.PrivateKey)
	out, err = openssh(t, port, agent1, "id", "-u")
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "0\n", out, "a session of the agent user, in the sandbox")

	// The harness door: ssh joins the key line's words into the command.
	out, err = openssh(t, port, harnessKey, "sandboxd", "keys", "--authorize", agent2Pub)
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "authorized SHA256:")
	out, err = openssh(t, port, agent2, "echo", "in")
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "in\n", out)
	out, err = openssh(t, port, agent1, "echo", "still")
	require.NoError(t, err, "the first key stays: %s", out)

	_, agent3Pub := keyPair(t, dir, "agent3")
	for _, tc := range []struct{ name, keys, want string }{
		{"a harness key", harnessPub, "harness key"},
		{"an option sandboxd cannot honour", agent3Pub + "\ncommand=\"true\" " + agent2Pub, "no key added"},
		{"no key", "# nothing\n", "no key given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.client.Call(context.Background(), control.Request{Op: "keys", Authorize: tc.keys}, &res)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	agent3 := filepath.Join(dir, "agent3")
	out, err = openssh(t, port, agent3, "echo", "in")
	require.Error(t, err, "a refused batch adds none of its keys: %s", out)
	out, err = openssh(t, port, harnessKey, "echo", "in")
	require.Error(t, err, "the harness key still gets no shell: %s", out)
}
