package join_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// roleDescribe prints what a joined process is: the file it runs, its
// namespaces, its process group and session.
const roleDescribe = "join-test-describe"

func init() {
	childproc.Add(roleDescribe, func([]string) int {
		exe, _ := os.Readlink("/proc/self/exe")
		fmt.Printf("exe %s\n", exe)
		environ, _ := os.ReadFile("/proc/self/environ")
		fmt.Printf("environ %q\n", strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00"))
		for _, ns := range []string{"user", "mnt", "pid", "net", "uts", "ipc", "cgroup"} {
			l, _ := os.Readlink("/proc/self/ns/" + ns)
			fmt.Printf("ns %s\n", l)
		}
		// Its pid as the sandbox sees it: 1 is the holder, so anything in
		// the sandbox's pid namespace is small and not 1.
		fmt.Printf("pid %d\n", os.Getpid())
		return 0
	})
}

func describe(t *testing.T, cmd *join.Cmd) (out string, pid int) {
	t.Helper()
	var b bytes.Buffer
	cmd.Stdout = &b
	require.NoError(t, cmd.Start())
	pid = cmd.Process.Pid
	require.NoError(t, cmd.Wait())
	return b.String(), pid
}

// assertNamespaces checks that out reports pid's namespaces of these kinds.
func assertNamespaces(t *testing.T, out string, pid int, kinds ...string) {
	t.Helper()
	for _, ns := range kinds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		require.NoError(t, err)
		assert.Contains(t, out, "ns "+l+"\n")
	}
}

// A joined process is this binary, run from its sealed copy (Pin),
// in exactly the holder's namespaces, with PATH and its role as its whole
// environment. No nsenter, no loader, no library from the filesystem the
// agent shares is involved (the dynamic-helper escape). It pins
// docs/failures.md#root-helpers-run-nothing-the-agent-wrote,
// docs/failures.md#one-decision-on-owning-the-network-namespace,
// docs/failures.md#sockets-inside-come-from-a-helper and
// docs/failures.md#helpers-and-pid-1-start-with-path-only.
func TestJoinedProcessIsThePinnedBinaryInTheHoldersNamespaces(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	require.NoError(t, join.Pin())

	out, pid := describe(t, sb.Target.Join(nil, roleDescribe))
	assert.Contains(t, out, "exe /memfd:sandboxd (deleted)\n", "runs the pinned copy")
	assert.Contains(t, out, fmt.Sprintf("environ %q\n", childproc.Environ(roleDescribe)), "nothing of the daemon's environment")
	assertNamespaces(t, out, sb.Holder.PID, "user", "mnt", "pid", "net", "uts", "ipc", "cgroup")
	assert.NotContains(t, out, "pid 1\n")
	assert.NotContains(t, out, fmt.Sprintf("pid %d\n", pid), "it sees itself with a pid of the sandbox's pid namespace")

	// The visitor's and the listeners' way in: user and network only.
	out, _ = describe(t, sb.Target.Join([]string{"user", "net"}, roleDescribe))
	assertNamespaces(t, out, sb.Holder.PID, "user", "net")
	assertNamespaces(t, out, os.Getpid(), "mnt", "pid")
}

// A sandbox that is gone is a clear setup error, never a process in the
// daemon's own namespaces.
func TestJoinAFinishedSandboxFailsClearly(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	target := sb.Target
	sb.Holder.Kill()
	<-sb.Holder.Done()
	err := target.Join(nil, roleDescribe).Start()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "namespace")

	err = join.Target{PID: os.Getpid(), Namespaces: []string{"bogus"}}.Join(nil, roleDescribe).Start()
	require.ErrorContains(t, err, `unknown namespace "bogus"`)
}

// Output written before exit is all there, and the exit status is the
// command's own, through every way a joined process's output is taken.
func TestJoinedOutputAndStatus(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Sh(t, "0", "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo err >&2; exit 42")
	assert.Equal(t, 42, r.Code)
	assert.Equal(t, 3000001, len(r.Stdout))
	assert.Equal(t, "err\n", r.Stderr)
	r = sb.Sh(t, "0", "kill -TERM $$")
	assert.Equal(t, 128+15, r.Code)
}

// roleBlank blanks its command line and prints what /proc then shows, and
// its os.Args, which must have kept their values.
const roleBlank = "join-test-blank"

func init() {
	childproc.Add(roleBlank, func(args []string) int {
		if err := join.BlankCommandLine(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		b, _ := os.ReadFile("/proc/self/cmdline")
		fmt.Printf("cmdline %q\nargs %q\n", strings.TrimRight(string(b), "\x00"), os.Args[1:])
		return 0
	})
}

// A copy forked into the sandbox's pid namespace shows the daemon's command
// line until it execs; the daemon's names nothing
// (docs/failures.md#nothing-inside-names-the-harness).
func TestBlankedCommandLineNamesNothing(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", "serve", "--harness-dir", "/media/sandboxd-secret", "--task", "secret-task")
	cmd.Env = childproc.Environ(roleBlank)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), `cmdline "sandboxd"`)
	assert.NotContains(t, strings.SplitN(string(out), "\n", 2)[0], "secret")
	assert.Contains(t, string(out), `args ["serve" "--harness-dir" "/media/sandboxd-secret" "--task" "secret-task"]`)
}
