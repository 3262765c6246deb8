package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/execclient"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// quickCases are exec command lines the quick path takes, and some it must
// leave to the full parser.
var quickCases = [][]string{
	{"--", "true"},
	{"true"},
	{"-i", "cat"},
	{"-u", "1000:1000", "-w", "/tmp", "-e", "A=1", "-e=B=2", "--timeout", "5s", "--", "sh", "-c", "x"},
	{"--harness-dir", "/media/x/", "-u=root", "--w=/", "--e", "C=3", "--", "--", "-i"},
	{"-harness-dir=/h", "ls", "-la"},
	{"-w", "-i", "pwd"}, // -w takes "-i" as its value, as the flag package does
	{"-e", "--", "true"},
	{"-", "x"},
	{"-t", "true"}, {"-it", "sh"}, {"-i=true", "x"}, {"-h"}, {"--help"}, {"-bogus", "x"}, {"-u"}, {"--"}, {},
	{"---u", "x"}, {"-=x", "y"}, {"-iu", "0", "x"}, {"-ti", "x"},
}

// What the quick path takes, it takes as exec's flags take it: the same
// harness dir and request, whatever the common case looks like.
func TestQuickParsesAsExecsFlags(t *testing.T) {
	taken := 0
	for _, args := range quickCases {
		if checkQuickAgainstFlags(t, args) {
			taken++
		}
	}
	assert.Equal(t, 9, taken, "the common cases the quick path takes")
}

func FuzzQuickParsesAsExecsFlags(f *testing.F) {
	for _, args := range quickCases {
		f.Add(strings.Join(args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, joined string) {
		checkQuickAgainstFlags(t, strings.Split(joined, "\x00"))
	})
}

func checkQuickAgainstFlags(t *testing.T, args []string) bool {
	t.Helper()
	env := os.Getenv("SANDBOXD_HARNESS_DIR")
	harness, req, ok := execclient.Quick(args, env)
	if !ok {
		return false
	}
	wantHarness, want, ok, _ := parseExec(args)
	require.True(t, ok, "the quick path takes %q, exec's flags refuse it", args)
	assert.Equal(t, wantHarness, harness, "%q", args)
	assert.Equal(t, want, req, "%q", args)
	return true
}

// A plain `sandboxd exec` runs before the daemon's libraries are
// initialized: reflect and all that waits for it (SSH, YAML, TOML, JSON,
// nftables) never start. One that needs a terminal goes the long way, and
// does; both say the same when no daemon serves.
func TestQuickExecRunsBeforeTheDaemonsLibraries(t *testing.T) {
	libraries := []string{"reflect", "encoding/json", "golang.org/x/crypto/ssh", "go.yaml.in/yaml/v3", "github.com/BurntSushi/toml", "github.com/google/nftables"}
	heavy := regexp.MustCompile(`(?m)^init (` + strings.Join(libraries, "|") + `) @`)
	harness := t.TempDir()
	env := []string{"GODEBUG=inittrace=1", "SANDBOXD_HARNESS_DIR=" + harness}

	quick := run(t, env, "exec", "--", "true")
	assert.Equal(t, exitOwn, quick.code)
	assert.Contains(t, quick.stderr, "sandboxd: exec: no sandboxd is serving at "+harness+"/run/control.sock: start it with `sandboxd serve`")
	assert.Contains(t, quick.stderr, "init os @")
	assert.NotRegexp(t, heavy, quick.stderr)

	long := run(t, env, "exec", "-t", "--", "true")
	assert.Equal(t, exitOwn, long.code)
	for _, lib := range libraries { // each name is one the binary does initialize
		assert.Contains(t, long.stderr, "init "+lib+" @")
	}
	assert.Contains(t, long.stderr, "sandboxd: exec: no sandboxd is serving at "+harness+"/run/control.sock")
}

// `sandboxd exec` against a real serve, by the quick path and by the long
// one (-t without a terminal): the command's output and exit status, stdin
// (under -t ended by a typed ^D), the daemon's refusal, the timeout, SIGHUP,
// SIGUSR1 and SIGUSR2 passed on to the command, and SIGTERM ending the
// command's whole tree.
func TestExecRunsInTheSandboxByEitherPath(t *testing.T) {
	s := startServe(t, []string{"SANDBOXD_LISTEN="}, "--log-format", "text")
	for _, path := range [][]string{{"exec"}, {"exec", "-t"}} {
		t.Run(strings.Join(path, " "), func(t *testing.T) {
			args := func(a ...string) []string { return append(append([]string{}, path...), a...) }
			r := s.client(nil, args("-e", "A=1", "--", "sh", "-c", `echo "A=$A" >&2; exit 7`)...)
			assert.Equal(t, 7, r.code)
			assert.Contains(t, r.stderr+r.stdout, "A=1") // -t merges stderr into the terminal's one stream
			r = s.client([]byte("from stdin\n"), args("-i", "--", "cat")...)
			assert.Equal(t, 0, r.code)
			if len(path) == 1 {
				assert.Equal(t, "from stdin\n", r.stdout)
			} else {
				// The terminal echoes the line, then cat prints it; the end of
				// the piped input is typed as ^D, which ends cat.
				assert.Equal(t, "from stdin\r\nfrom stdin\r\n", r.stdout)
				r = s.client([]byte("no newline"), args("-i", "--", "cat")...)
				assert.Equal(t, 0, r.code)
				assert.Equal(t, "no newlineno newline", r.stdout, "an unfinished line is handed over, then ended")
			}

			r = s.client(nil, args("-u", "no-such-user", "--", "true")...)
			assert.Equal(t, exitOwn, r.code)
			assert.Contains(t, r.stderr, "sandboxd: exec: exec -u no-such-user:")

			r = s.client(nil, args("--timeout", "300ms", "--", "sleep", "30")...)
			assert.Equal(t, 124, r.code)
			assert.Contains(t, r.stderr, "sandboxd: exec: timed out after 300ms; the command's whole tree was killed")

			// A client that never ends fails the test rather than hang it.
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			marker := fmt.Sprintf("sleep 3%d", len(path))
			// SIGHUP too: under nohup (as a CI runner may) serve starts with it
			// ignored, and a session must not inherit that, or sh could not
			// trap it.
			cmd := exec.CommandContext(ctx, bin, args("--", "sh", "-c", `trap 'echo got-hup' HUP; trap 'echo got-usr1' USR1; trap 'echo got-usr2' USR2; echo ready; while :; do `+marker+`; done`)...)
			cmd.Env = cleanEnv("SANDBOXD_HARNESS_DIR=" + s.harness)
			var out, errb sandboxtest.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			require.NoError(t, cmd.Start())
			out.WaitFor(t, "ready")
			require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
			out.WaitFor(t, "got-hup")
			require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
			out.WaitFor(t, "got-usr1")
			require.NoError(t, cmd.Process.Signal(syscall.SIGUSR2))
			out.WaitFor(t, "got-usr2")
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			err := cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, exitOwn, ee.ExitCode())
			// The long path's main also takes SIGTERM, for its context.
			assert.Regexp(t, `sandboxd: exec: ended by (SIGTERM|a signal): the command's whole tree was killed`, errb.String())
			assert.Eventually(t, func() bool {
				r := s.client(nil, "exec", "--", "sh", "-c", "ps -eo args | grep -c '^"+marker+"$'")
				return r.stdout == "0\n"
			}, 10*time.Second, 50*time.Millisecond, "the command's tree is gone")
		})
	}
}
