package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// StartTinyproxy runs Debian's tinyproxy on listenIP in a mount namespace
// of its own, whose hosts file maps each name of hosts to its address: the
// names resolve for the upstream proxy alone, as a company proxy resolves
// names the sandbox's machine cannot. It returns the proxy's address and
// its log.
func StartTinyproxy(t *testing.T, listenIP string, hosts map[string]string) (addr, logPath string) {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("tinyproxy"); err != nil {
		Need(t, "tinyproxy (apt-get install tinyproxy)")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(listenIP, "0"))
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	logPath = filepath.Join(dir, "tinyproxy.log")
	lines := "127.0.0.1 localhost\n"
	for name, ip := range hosts {
		lines += ip + " " + name + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts"), []byte(lines), 0o644))
	// No ConnectPort line: CONNECT to every port, which the test's
	// upstreams on ephemeral ports need; no Allow line: every client of
	// the address it listens on.
	conf := fmt.Sprintf("Port %d\nListen %s\nTimeout 10\nLogFile %q\nLogLevel Connect\nMaxClients 20\nUser root\nGroup root\n", port, listenIP, logPath)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tinyproxy.conf"), []byte(conf), 0o644))
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1/hosts" /etc/hosts && exec tinyproxy -d -c "$1/tinyproxy.conf"`, "sh", dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr = net.JoinHostPort(listenIP, fmt.Sprint(port))
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "tinyproxy listens on %s", addr)
	return addr, logPath
}
