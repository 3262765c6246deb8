package join_test

import (
	"os"
	"os/signal"
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

// Signals the daemon's starter ignored (SIGHUP under nohup, anything under
// a supervisor that ignores SIGPIPE) survive fork and exec, so a command
// would start unable to be hung up or to trap them. Every session starts
// with every signal at its default and none blocked, as after a login.
func TestSessionsStartWithDefaultSignals(t *testing.T) {
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGUSR1)
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGUSR1) })
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Run(t, "1000:1000", []string{"PATH=/usr/bin:/bin"}, "cat", "/proc/self/status")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "SigIgn:\t0000000000000000\n")
	assert.Contains(t, r.Stdout, "SigBlk:\t0000000000000000\n")
}
