package join_test

import (
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

func TestJoinRunsAsUserWithExactEnv(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Run(t, "0", []string{"PATH=/usr/bin:/bin", "FOO=bar", "SANDBOXD_LOOKS_INTERNAL=kept"}, "env")
	require.Equal(t, 0, r.Code, r.Stderr)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	assert.ElementsMatch(t, []string{"PATH=/usr/bin:/bin", "FOO=bar", "SANDBOXD_LOOKS_INTERNAL=kept"}, lines)

	r = sb.Sh(t, "1000:1000", "id -u; id -g; cat /proc/self/status | grep -E '^Cap(Prm|Eff|Bnd)'")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "1000\n1000\n")
	assert.Contains(t, r.Stdout, "CapPrm:\t0000000000000000")
}

func TestExitCodesAndSetupErrors(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	assert.Equal(t, 7, sb.Sh(t, "0", "exit 7").Code)
	r := sb.Run(t, "0", nil, "no-such-program")
	assert.Equal(t, 127, r.Code)
	assert.Contains(t, r.Stderr, "not found")

	// A file that may not be run is 126, like env(1); a later PATH entry
	// that may is found past it, as execvp does.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/noexec", []byte("#!/bin/sh\necho no\n"), 0o644))
	r = sb.Run(t, "0", nil, dir+"/noexec")
	assert.Equal(t, 126, r.Code)
	assert.Contains(t, r.Stderr, "permission denied")
	require.NoError(t, os.Mkdir(dir+"/bin", 0o755))
	require.NoError(t, os.WriteFile(dir+"/bin/noexec", []byte("#!/bin/sh\necho found\n"), 0o755))
	r = sb.Run(t, "0", []string{"PATH=" + dir + ":" + dir + "/bin:/usr/bin:/bin"}, "noexec")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "found\n", r.Stdout)

	// A working directory that does not exist inside is refused with the fix.
	st, err := sb.Target.Command(join.Spec{User: idmap.User{}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/no/such/dir", Argv: []string{"true"}})
	require.NoError(t, err)
	_, err = st.Start()
	var se *join.SetupError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 125, se.Code)
	assert.Contains(t, se.Msg, "cannot use working directory /no/such/dir")
}

// Signals ignored or blocked by whoever started the daemon (SIGHUP under
// nohup, SIGINT under a script's `serve &`, a blocked mask from a
// supervisor) survive fork and exec, so a command would start unable to be
// hung up or to trap them; so would one the daemon itself ignores. Every
// session starts with every signal at its default and none blocked, as
// after a login. The check runs in a copy of this test binary started that
// way (by perl, which can block signals before an exec), so that the rest
// of the package's tests keep their signals.
func TestSessionsStartWithDefaultSignals(t *testing.T) {
	if os.Getenv("JOIN_TEST_SIGNALS_INHERITED") == "" {
		// perl-base is in every Debian image, and its POSIX module can
		// block signals before an exec.
		start := `use POSIX;
$SIG{HUP} = "IGNORE"; $SIG{INT} = "IGNORE";
sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGUSR2, SIGTERM)) or die "sigprocmask: $!";
exec {$ARGV[0]} @ARGV or die "exec: $!";`
		cmd := exec.Command("perl", "-e", start, os.Args[0], "-test.run=^TestSessionsStartWithDefaultSignals$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "JOIN_TEST_SIGNALS_INHERITED=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestSessionsStartWithDefaultSignals", "%s", out)
		return
	}
	// What this copy started with (and whatever else its starter ignored):
	// the test means nothing without it.
	mask := func(field string) uint64 {
		b, err := os.ReadFile("/proc/self/status")
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^` + field + `:\t([0-9a-f]+)$`).FindSubmatch(b)
		require.NotNil(t, m, "no %s in /proc/self/status", field)
		v, err := strconv.ParseUint(string(m[1]), 16, 64)
		require.NoError(t, err)
		return v
	}
	const hupAndInt = 1<<(syscall.SIGHUP-1) | 1<<(syscall.SIGINT-1)
	require.Equal(t, uint64(hupAndInt), mask("SigIgn")&hupAndInt, "SIGHUP and SIGINT ignored at start")
	require.NotZero(t, mask("SigBlk")&(1<<(syscall.SIGUSR2-1)), "SIGUSR2 blocked at start")
	signal.Ignore(syscall.SIGUSR1) // one the daemon ignores itself
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Run(t, "1000:1000", []string{"PATH=/usr/bin:/bin"}, "cat", "/proc/self/status")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "SigIgn:\t0000000000000000\n")
	assert.Contains(t, r.Stdout, "SigBlk:\t0000000000000000\n")
}
