package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bin is this package built as people build it with go build or go
// install: without the ldflags that make build adds.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sandboxd")
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds the command into out, with the checkout's VCS facts when
// there is a checkout to read them from.
func build(out string, extra ...string) error {
	args := append([]string{"build", "-buildvcs=auto"}, extra...)
	if exec.Command("git", "rev-parse", "HEAD").Run() == nil {
		args[1] = "-buildvcs=true"
	}
	cmd := exec.Command("go", append(args, "-o", out, ".")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, b)
	}
	return nil
}

type result struct {
	stdout, stderr string
	code           int
}

// cleanEnv is this process's environment without sandboxd's variables, plus env.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDBOXD_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// run runs the built sandboxd with args and env (added to a clean environment).
func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return runBin(t, bin, env, nil, args...)
}

func runBin(t *testing.T, path string, env []string, stdin []byte, args ...string) result {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = cleanEnv(env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "run %v: %v", args, err)
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// A flag line of the help: the flag, then its argument's name in capitals.
var flagLine = regexp.MustCompile(`^  (-[a-z]|--[a-z][a-z0-9-]+)( [A-Z][A-Z0-9_:.=\[\]]*)?$`)

// Help is asked for: it goes to stdout, nothing to stderr, exit 0. Its
// flags name their arguments; no backquote is left over from a usage string.
func TestHelpGoesToStdoutAndExitsZero(t *testing.T) {
	cases := [][]string{{"-h"}, {"--help"}, {"help"}, {"help", "serve"}}
	for name := range commands {
		cases = append(cases, []string{name, "-h"}, []string{name, "--help"})
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := run(t, nil, args...)
			assert.Equal(t, 0, r.code)
			assert.Empty(t, r.stderr)
			assert.True(t, strings.HasPrefix(r.stdout, "usage: sandboxd "), "%q", r.stdout)
			assert.NotContains(t, r.stdout, "`")
			for _, line := range strings.Split(r.stdout, "\n") {
				if strings.HasPrefix(line, "  -") {
					assert.Regexp(t, flagLine, line)
				}
			}
		})
	}
	r := run(t, nil, "serve", "-h")
	for _, want := range []string{"--network MODE", "--allow-host NAME", "--peer NAME:PORT[=TARGET]", "env SANDBOXD_EGRESS_ALLOW_CIDR",
		"--authorized-keys FILE", "env SANDBOXD_AUTHORIZED_KEYS_FILE, or SANDBOXD_AUTHORIZED_KEYS"} {
		assert.Contains(t, r.stdout, want)
	}
}

// A command line that is wrong exits 2 with the reason on stderr and
// nothing on stdout; 125 stays for sandboxd's own failures.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{nil, nil, "name a command"},
		{[]string{"bogus"}, nil, `unknown command "bogus"`},
		{[]string{"help", "bogus"}, nil, `unknown command "bogus"`},
		{[]string{"exec", "--bogus"}, nil, "flag provided but not defined: -bogus"},
		{[]string{"exec", "-tx", "--", "true"}, nil, "flag provided but not defined: -tx"},
		{[]string{"exec", "-it"}, nil, "no command given"},
		{[]string{"exec", "--timeout"}, nil, "flag needs an argument: -timeout"},
		{[]string{"trial"}, nil, "name a task directory"},
		{[]string{"trial", "a", "b"}, nil, `unexpected argument "b"`},
		{[]string{"status", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"version", "--bogus"}, nil, "-bogus"},
		{[]string{"adapt"}, nil, "name at least one task directory"},
		{[]string{"serve", "--network", "internet"}, nil, `"internet" is not one of public, allowlist, no-network`},
		{[]string{"serve", "--peer", "db"}, nil, `peer "db" has no port`},
		{[]string{"serve", "--allow-host", "https://pypi.org"}, nil, `invalid value "https://pypi.org" for flag -allow-host`},
		{[]string{"serve", "--log-format", "xml"}, nil, "xml"},
		{[]string{"serve"}, []string{"SANDBOXD_HOST=yes"}, `SANDBOXD_HOST="yes": a boolean setting takes 1, true, 0 or false`},
		{[]string{"serve"}, []string{"SANDBOXD_ALLOW_DEGRADED="}, `SANDBOXD_ALLOW_DEGRADED="": a boolean setting`},
		{[]string{"serve"}, []string{"SANDBOXD_NETWORK=internet"}, `SANDBOXD_NETWORK="internet"`},
		{[]string{"serve"}, []string{"SANDBOXD_PEER=db:5432,cache"}, `SANDBOXD_PEER="db:5432,cache": peer "cache" has no port`},
		{[]string{"serve"}, []string{"SANDBOXD_EGRESS_ALLOW_CIDR=10.0.0.1"}, `SANDBOXD_EGRESS_ALLOW_CIDR="10.0.0.1"`},
		{[]string{"serve"}, []string{"SANDBOXD_SESSION_TIMEOUT=soon"}, `SANDBOXD_SESSION_TIMEOUT="soon"`},
		{[]string{"serve"}, []string{"SANDBOXD_AGENT_MAX_PROCS=many"}, `SANDBOXD_AGENT_MAX_PROCS="many"`},
	} {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			r := run(t, tc.env, tc.args...)
			assert.Equal(t, exitUsage, r.code, "stderr: %s", r.stderr)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, tc.want)
		})
	}
}

// A request the daemon refuses stays 125: here, no daemon to talk to.
func TestRefusedRequestExits125(t *testing.T) {
	r := run(t, []string{"SANDBOXD_HARNESS_DIR=" + t.TempDir()}, "status")
	assert.Equal(t, exitOwn, r.code)
	assert.Contains(t, r.stderr, "sandboxd: status: ")
}

func TestVersion(t *testing.T) {
	r := run(t, nil, "--version")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^sandboxd \S+ \(.*go1\.`, r.stdout)

	r = run(t, nil, "version", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var v versionInfo
	require.NoError(t, jsonUnmarshal(r.stdout, &v))
	assert.Equal(t, "github.com/sandboxd/sandboxd", v.Module)
	assert.Equal(t, runtime.Version(), v.Go)
	assert.NotEmpty(t, v.Version)
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		// No ldflags here, as under go build or go install: the version
		// is the toolchain's, and the commit is the checkout's.
		assert.Equal(t, strings.TrimSpace(string(head)), v.Commit)
		assert.NotEmpty(t, v.CommitTime)
		assert.Equal(t, v.ModuleVersion, v.Version)
	}

	// make build sets the release with ldflags; it wins.
	withLdflags := filepath.Join(t.TempDir(), "sandboxd")
	require.NoError(t, build(withLdflags, "-ldflags", "-X github.com/sandboxd/sandboxd/internal/daemon.Version=v9.8.7-test"))
	r = runBin(t, withLdflags, nil, nil, "version", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, jsonUnmarshal(r.stdout, &v))
	assert.Equal(t, "v9.8.7-test", v.Version)
	r = runBin(t, withLdflags, nil, nil, "version")
	assert.True(t, strings.HasPrefix(r.stdout, "sandboxd v9.8.7-test ("), r.stdout)
}

func TestVersionOfBuildInfo(t *testing.T) {
	// go install github.com/sandboxd/sandboxd/cmd/sandboxd@v1.2.3: the
	// module's version, no VCS facts.
	v := versionOf("dev", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/sandboxd/sandboxd", Version: "v1.2.3"}})
	assert.Equal(t, "v1.2.3", v.Version)
	assert.Equal(t, "go1.26.0", v.Go)
	assert.Empty(t, v.Commit)

	// A plain build of an older toolchain, outside a checkout.
	v = versionOf("dev", &debug.BuildInfo{GoVersion: "go1.22.0", Main: debug.Module{Version: "(devel)"}})
	assert.Equal(t, "dev", v.Version)

	// No build info at all.
	v = versionOf("", nil)
	assert.Equal(t, "dev", v.Version)
	assert.Equal(t, runtime.Version(), v.Go)

	v = versionOf("v2.0.0", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}})
	assert.Equal(t, versionInfo{Version: "v2.0.0", ModuleVersion: "v1.2.3", Commit: "0123456789abcdef", CommitTime: "2026-01-02T03:04:05Z",
		Modified: true, Go: v.Go, Platform: runtime.GOOS + "/" + runtime.GOARCH}, v)
}

func TestUnbundleShortFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Bool("t", false, "")
	fs.Bool("i", false, "")
	fs.String("w", "", "")
	fs.String("e", "", "")
	fs.String("timeout", "", "")
	for _, tc := range []struct{ in, want string }{
		{"-it -- bash", "-i -t -- bash"},
		{"-ti bash -it", "-t -i bash -it"},
		{"-itw /tmp -- ls", "-i -t -w /tmp -- ls"},
		{"-e -it -t", "-e -it -t"},
		{"-e=-it -ti", "-e=-it -t -i"},
		{"--timeout 5s -it", "--timeout 5s -i -t"},
		{"-wi /tmp", "-wi /tmp"},
		{"-ix", "-ix"},
		{"-", "-"},
	} {
		assert.Equal(t, tc.want, strings.Join(unbundle(fs, strings.Fields(tc.in)), " "), tc.in)
	}
}

// sandboxd's own failure to grade is a verdict too, of status error and
// exit 125: under --json the one document on stdout, with no reward, and the
// reason on stderr either way; without --json nothing on stdout.
func TestGradeWithoutDaemonIsStatusError(t *testing.T) {
	env := []string{"SANDBOXD_HARNESS_DIR=" + t.TempDir()}
	r := run(t, env, "grade", "--json")
	assert.Equal(t, exitOwn, r.code)
	var v map[string]any
	require.NoError(t, jsonUnmarshal(r.stdout, &v), r.stdout)
	assert.Equal(t, "error", v["status"])
	assert.Contains(t, v, "reward")
	assert.Nil(t, v["reward"])
	assert.Contains(t, v["message"], "no sandboxd is serving")
	assert.Contains(t, r.stderr, "sandboxd: error: no sandboxd is serving")

	r = run(t, env, "grade")
	assert.Equal(t, exitOwn, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "no sandboxd is serving")
}
