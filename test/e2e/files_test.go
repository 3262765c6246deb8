//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filesWithoutOpenSSH moves files into and out of an adapted container
// whose image has no OpenSSH at all (a debootstrap minbase base: no
// openssh-server, openssh-sftp-server or openssh-client), with OpenSSH's
// scp (SFTP and -O), sftp, and paramiko's SFTP and scp module: sandboxd
// serves them itself.
func (e *env) filesWithoutOpenSSH(t *testing.T, image string) {
	c := e.runContainer(t, image, securityFlags(e.repo))
	_, err := dockerErr(context.Background(), "exec", c.ID, "sh", "-c", "ls /usr/lib/openssh/sftp-server /usr/lib/sftp-server /usr/bin/scp /usr/bin/sftp /usr/sbin/sshd")
	require.Error(t, err, "the image carries none of OpenSSH's programs")

	dir := t.TempDir()
	src := filepath.Join(dir, "payload.bin")
	b := make([]byte, 8<<20)
	rand.Read(b)
	require.NoError(t, os.WriteFile(src, b, 0o640))
	sum := sha256.Sum256(b)
	want := hex.EncodeToString(sum[:])
	inside := func(path string) string {
		out := docker(t, "exec", c.ID, "sha256sum", path)
		f, _, _ := strings.Cut(out, " ")
		return f
	}
	local := func(path string) string {
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		s := sha256.Sum256(got)
		return hex.EncodeToString(s[:])
	}
	opts := []string{"-i", e.privKey, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"}
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
	}
	scp := append([]string{"-P", "2222"}, opts...)

	run("scp", append(scp, src, "root@"+c.IP+":/tmp/by-scp.bin")...)
	assert.Equal(t, want, inside("/tmp/by-scp.bin"), "scp (SFTP) in")
	run("scp", append(append(scp, "-O"), src, "root@"+c.IP+":/tmp/by-scp-O.bin")...)
	assert.Equal(t, want, inside("/tmp/by-scp-O.bin"), "scp -O in")
	run("scp", append(append(scp, "-O"), "root@"+c.IP+":/tmp/by-scp.bin", filepath.Join(dir, "back-O.bin"))...)
	assert.Equal(t, want, local(filepath.Join(dir, "back-O.bin")), "scp -O out")

	batch := filepath.Join(dir, "batch")
	require.NoError(t, os.WriteFile(batch, []byte(fmt.Sprintf("get /tmp/by-scp-O.bin %s\nput %s /tmp/by-sftp.bin\n", filepath.Join(dir, "back-sftp.bin"), src)), 0o644))
	run("sftp", append(append([]string{"-P", "2222", "-b", batch}, opts...), "root@"+c.IP)...)
	assert.Equal(t, want, local(filepath.Join(dir, "back-sftp.bin")), "sftp get")
	assert.Equal(t, want, inside("/tmp/by-sftp.bin"), "sftp put")

	py := `import sys, paramiko, scp
k = paramiko.Ed25519Key.from_private_key_file(sys.argv[2])
c = paramiko.SSHClient(); c.set_missing_host_key_policy(paramiko.AutoAddPolicy())
c.connect(sys.argv[1], port=2222, username="root", pkey=k, allow_agent=False, look_for_keys=False)
s = c.open_sftp(); s.put(sys.argv[3], "/tmp/by-paramiko.bin"); s.get("/tmp/by-sftp.bin", sys.argv[4]); s.close()
with scp.SCPClient(c.get_transport()) as x: x.put(sys.argv[3], "/tmp/by-paramiko-scp.bin")
c.close()
`
	run("/usr/bin/python3", "-c", py, c.IP, e.privKey, src, filepath.Join(dir, "back-paramiko.bin"))
	assert.Equal(t, want, inside("/tmp/by-paramiko.bin"), "paramiko SFTP put")
	assert.Equal(t, want, local(filepath.Join(dir, "back-paramiko.bin")), "paramiko SFTP get")
	assert.Equal(t, want, inside("/tmp/by-paramiko-scp.bin"), "paramiko's scp module (the legacy protocol)")
}
