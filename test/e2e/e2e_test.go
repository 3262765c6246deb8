//go:build e2e

// Package e2e runs adapted images in a real Docker engine the way a harness
// would: `sandboxd adapt` → `docker run` with the documented flags, the
// agents' key by value and Harbor's `sh -c "sleep infinity"` → `sandboxd
// status` → the OpenSSH client runs the oracle (or nothing) → `docker exec …
// sandboxd grade --json`. Every task of testdata/tasks runs on a bookworm
// base, the server task also on bullseye (bwrap 0.4.1), and the compose task
// of testdata/compose with its Redis sidecar. No image is pulled: bases come
// from images/base.sh.
//
// Run with `make e2e` (root, a Docker engine, ssh and ssh-keygen). It removes
// every container, network and tag it makes; the bases the task Dockerfiles
// build are left as the engine's build cache, so that the next run does not
// install the same packages again (SANDBOXD_E2E_PRUNE=1 removes them too).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/layer"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// prefix is the repository prefix of every image the e2e makes.
const prefix = "sandboxd-e2e"

// parallel is how many containers run at once: each is mostly waiting (on
// bwrap, SSH, the verifier), so more than the two cores.
const parallel = 4

type env struct {
	repo        string // repository root
	work        string // this run's scratch directory
	bin         string // the static sandboxd under test
	upstreamBin string // the test upstream
	privKey     string // the agents' key
	pubKey      string
}

// figures are the benchmark numbers, printed after the tests.
var figures struct {
	sync.Mutex
	lines []string
	ready []time.Duration
}

func figure(format string, args ...any) {
	figures.Lock()
	defer figures.Unlock()
	figures.lines = append(figures.lines, fmt.Sprintf(format, args...))
}

func TestMain(m *testing.M) {
	code := m.Run()
	figures.Lock()
	if len(figures.ready) > 0 {
		r := append([]time.Duration{}, figures.ready...)
		slices.Sort(r)
		figures.lines = append(figures.lines, fmt.Sprintf("container start → sandboxd status ready: min %.2fs, median %.2fs, max %.2fs over %d containers",
			r[0].Seconds(), r[len(r)/2].Seconds(), r[len(r)-1].Seconds(), len(r)))
	}
	if len(figures.lines) > 0 {
		fmt.Println("e2e figures:")
		for _, l := range figures.lines {
			fmt.Println("  " + l)
		}
	}
	figures.Unlock()
	os.Exit(code)
}

// setup checks what the e2e needs, builds the binaries and makes sure the
// base images exist. Missing prerequisites fail the run under make (which
// sets SANDBOXD_REQUIRE_PRIVILEGED) and skip it otherwise.
func setup(t *testing.T) *env {
	missing := func(what string) { sandboxtest.NeedUnderMake(t, what) }
	if os.Geteuid() != 0 {
		missing("root (images/base.sh runs debootstrap)")
	}
	for _, tool := range []string{"docker", "ssh", "ssh-keygen", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool)
		}
	}
	if _, err := dockerErr(context.Background(), "info"); err != nil {
		missing("a Docker engine that answers: " + err.Error())
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	e := &env{repo: repo, work: t.TempDir()}
	e.bin = filepath.Join(e.work, "bin", "sandboxd")
	e.upstreamBin = filepath.Join(e.work, "bin", "upstream")

	var wg sync.WaitGroup
	errs := make([]error, 5)
	goBuild := func(i int, out, pkg string) {
		defer wg.Done()
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/sandboxd/sandboxd/internal/daemon.Version=e2e", "-o", out, pkg)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			errs[i] = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	base := func(i int, args ...string) {
		defer wg.Done()
		cmd := exec.Command(filepath.Join(repo, "images", "base.sh"), args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			errs[i] = fmt.Errorf("images/base.sh %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	wg.Add(5)
	go goBuild(0, e.bin, "./cmd/sandboxd")
	go goBuild(1, e.upstreamBin, "./test/e2e/upstream")
	go base(2, "bookworm")
	go base(3, "bullseye")
	go base(4, "bookworm", "--with-sandbox-tools")
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	e.privKey = filepath.Join(e.work, "agent_key")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "e2e-agent", "-f", e.privKey).CombinedOutput()
	require.NoError(t, err, "%s", out)
	pub, err := os.ReadFile(e.privKey + ".pub")
	require.NoError(t, err)
	e.pubKey = strings.TrimSpace(string(pub))
	return e
}

var fromDebian = regexp.MustCompile(`(?m)^(FROM\s+)debian:(bookworm|bullseye)\b`)

// dataset copies task directories into work/<name>/, their bases rewritten
// from debian:<suite> (which cannot be pulled here) to images/base.sh's
// sandboxd-base:<suite>.
func (e *env) dataset(t *testing.T, name, suite string, srcs ...string) []string {
	t.Helper()
	var dirs []string
	for _, src := range srcs {
		dst := filepath.Join(e.work, name, filepath.Base(src))
		copyTree(t, src, dst)
		err := filepath.WalkDir(filepath.Join(dst, "environment"), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "Dockerfile" {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, fromDebian.ReplaceAll(b, []byte("${1}sandboxd-base:"+suite)), 0o644)
		})
		require.NoError(t, err)
		dirs = append(dirs, dst)
	}
	return dirs
}

// taskDirs lists the task directories under dir.
func taskDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "task.toml")); err == nil {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	require.NotEmpty(t, out, "no tasks in %s", dir)
	return out
}

// adapt runs `sandboxd adapt --json ARGS` and returns the manifest, stderr
// and the exit status.
func (e *env) adapt(t *testing.T, extraEnv []string, args ...string) (*layer.Manifest, string, int) {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"adapt", "--json"}, args...)...)
	cmd.Dir = e.work
	cmd.Env = append(append(os.Environ(), "SANDBOXD_SECCOMP_PROFILE="+filepath.Join(e.repo, "images", "seccomp.json")), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var m layer.Manifest
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &m), "adapt --json printed one JSON document; stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	e.removeImages(t, &m)
	return &m, stderr.String(), code
}

// removeImages removes, at the end of the test, every tag the manifest names.
// The bases adapt built from the tasks' Dockerfiles (and the tools layers
// over them) stay as the engine's build cache, which is what keeps a second
// run from installing the same packages again; SANDBOXD_E2E_PRUNE=1 removes
// them too, never an image that still has a tag (a base can be
// sandboxd-base:* itself).
func (e *env) removeImages(t *testing.T, m *layer.Manifest) {
	var refs, ids []string
	for _, te := range m.Tasks {
		refs = append(refs, te.Image)
	}
	for _, g := range m.Groups {
		refs = append(refs, g.Image)
		for _, s := range g.Sidecars {
			if s.Built {
				refs = append(refs, s.Image)
			}
		}
		if os.Getenv("SANDBOXD_E2E_PRUNE") == "1" {
			ids = append(ids, g.ToolsID, g.BaseID)
		}
	}
	t.Cleanup(func() {
		for _, r := range refs {
			dockerErr(context.Background(), "rmi", "-f", r)
		}
		for _, id := range ids {
			if id == "" {
				continue
			}
			tags, err := dockerErr(context.Background(), "image", "inspect", "--format", "{{len .RepoTags}}", id)
			if err == nil && strings.TrimSpace(tags) == "0" {
				dockerErr(context.Background(), "rmi", id)
			}
		}
	})
}

func TestAdaptedImages(t *testing.T) {
	e := setup(t)
	tasks := taskDirs(t, filepath.Join(e.repo, "testdata", "tasks"))
	compose := taskDirs(t, filepath.Join(e.repo, "testdata", "compose"))
	dirs := e.dataset(t, "e2e-bookworm", "bookworm", append(tasks, compose...)...)
	dirs = append(dirs, e.dataset(t, "e2e-bullseye", "bullseye", filepath.Join(e.repo, "testdata", "tasks", "server-left-running"))...)

	start := time.Now()
	m, stderr, code := e.adapt(t, nil, append([]string{"--tag", prefix}, dirs...)...)
	require.Equal(t, 0, code, "adapt failed:\n%s", tail(stderr, 60))
	require.Empty(t, m.Errors)
	require.Len(t, m.Tasks, len(dirs))
	figure("adapt of %d tasks in %d groups (bases built, or from the build cache of an earlier run): %.1fs", len(m.Tasks), len(m.Groups), time.Since(start).Seconds())
	for _, g := range m.Groups {
		figure("  group %s (%s): %.1fs, %.1f MB over the base, installed %v, %s", g.Name, strings.Join(g.Tasks, ","), g.Seconds, float64(g.LayerBytes)/1e6, g.Installed, g.Assembly)
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	run := func(name string, f func(t *testing.T)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(name, f)
		}()
	}
	for _, te := range m.Tasks {
		tk, err := task.Load(te.Dir)
		require.NoError(t, err)
		name := filepath.Base(filepath.Dir(te.Dir)) + "/" + te.Name
		for _, agent := range []string{"oracle", "nop"} {
			run(name+"/"+agent, func(t *testing.T) { e.trial(t, te, tk, agent) })
		}
	}
	run("doctor without the flags", func(t *testing.T) { e.doctor(t, m.Tasks[0].Image) })
	run("bad input", e.badInput)
	run("out route builds the same image", e.outRoute)
	run("cached base", e.cachedBase)
	wg.Wait()
}

// trial runs one agent on one task in a fresh container and checks the
// verdict against the task's expectation.
func (e *env) trial(t *testing.T, te layer.TaskEntry, tk *task.Task, agent string) {
	var c *container
	if te.Compose != "" {
		c = e.composeUp(t, te.Compose)
	} else {
		var extra []string
		if needs(tk, "upstream") {
			// A test host of its own, as the task's internet: the
			// substrate's loopback is never caught, so an upstream there
			// would be unreachable to an agent without proxy variables.
			// Its private address is opened deliberately, replacing the
			// task's own ranges.
			network, ip := e.upstreamHost(t)
			extra = append(extra, "--network", network, "-e", "SANDBOXD_EGRESS_ALLOW_CIDR="+ip+"/32")
		}
		c = e.runContainer(t, te.Image, securityFlags(e.repo), extra...)
	}
	figures.Lock()
	figures.ready = append(figures.ready, c.Ready)
	figures.Unlock()

	if strings.Contains(te.Dir, "e2e-bullseye") {
		st := docker(t, "exec", c.ID, "/media/sandboxd/bin/sandboxd", "status")
		assert.Contains(t, st, `"bwrap": "0.4.1"`, "bullseye's bubblewrap")
	}

	timeout := tk.Agent.Timeout
	if timeout == 0 || timeout > 5*time.Minute {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	command, stdin := "true", ""
	if agent == "oracle" {
		command, stdin = "cd "+shq(tk.Workdir())+" && bash -s", tk.SolutionScript
	}
	out, err := e.sshRun(ctx, c.IP, command, stdin)
	require.NoError(t, err, "the %s over SSH:\n%s", agent, out)

	v := e.grade(t, c.ID, tk.Verifier.Timeout+2*time.Minute)
	want := metaString(tk, "sandboxd_expect_"+agent, map[string]string{"oracle": "graded:1", "nop": "graded:0"}[agent])
	status, reward, hasReward := strings.Cut(want, ":")
	require.Equal(t, status, v.Status, "verdict: %+v (%s)", v, v.Stdout)
	if hasReward {
		got, ok := v.reward()
		require.True(t, ok, "no reward in %s", v.Reward)
		assert.Equal(t, reward, fmt.Sprint(got), "verdict: %+v", v)
	}

	if te.Compose != "" && agent == "oracle" {
		// The oracle reached the real sidecar, by name: the value is in it.
		stored := regexp.MustCompile(`stored (\S+) in redis`).FindStringSubmatch(out)
		require.Len(t, stored, 2, "the oracle said: %s", out)
		require.Len(t, te.Peers, 1, "one redis sidecar")
		redis := c.sidecars[te.Peers[0].Name]
		require.NotEmpty(t, redis)
		got := strings.TrimSpace(docker(t, "exec", redis, "redis-cli", "-p", fmt.Sprint(te.Peers[0].Port), "GET", "sandboxd:answer"))
		assert.Equal(t, stored[1], got)
	}
}

func needs(tk *task.Task, what string) bool {
	l, _ := tk.Metadata["sandboxd_needs"].([]any)
	for _, v := range l {
		if v == what {
			return true
		}
	}
	return false
}

func metaString(tk *task.Task, key, def string) string {
	if s, ok := tk.Metadata[key].(string); ok {
		return s
	}
	return def
}

// composeUp runs an emitted compose file by hand, as `docker compose up`
// would (docker-compose 1.29 here rejects systempaths=unconfined, and Compose
// v2 is not installed): one network, each sidecar under its service name,
// then main with the file's security options and the agents' key.
func (e *env) composeUp(t *testing.T, file string) *container {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var doc struct {
		Services map[string]map[string]any
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	network := "sandboxd-e2e-" + randomSuffix()
	docker(t, "network", "create", network)
	t.Cleanup(func() { dockerErr(context.Background(), "network", "rm", network) })

	sidecars := map[string]string{}
	var names []string
	for n := range doc.Services {
		if n != "main" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		svc := doc.Services[n]
		args := []string{"run", "-d", "--label", "org.sandboxd.e2e=1", "--network", network, "--network-alias", n, fmt.Sprint(svc["image"])}
		switch c := svc["command"].(type) {
		case []any:
			for _, a := range c {
				args = append(args, fmt.Sprint(a))
			}
		case string:
			args = append(args, "sh", "-c", c)
		}
		id := strings.TrimSpace(docker(t, args...))
		t.Cleanup(func() { dockerErr(context.Background(), "rm", "-f", id) })
		sidecars[n] = id
	}

	main := doc.Services["main"]
	var security []string
	for _, o := range main["security_opt"].([]any) {
		opt := fmt.Sprint(o)
		if p, ok := strings.CutPrefix(opt, "seccomp="); ok && !filepath.IsAbs(p) {
			opt = "seccomp=" + filepath.Join(filepath.Dir(file), p)
		}
		security = append(security, "--security-opt", opt)
	}
	extra := []string{"--network", network, "--network-alias", "main"}
	if env, ok := main["environment"].(map[string]any); ok {
		for k, v := range env {
			if k != "SANDBOXD_AUTHORIZED_KEYS" {
				extra = append(extra, "-e", k+"="+fmt.Sprint(v))
			}
		}
	}
	c := e.runContainer(t, fmt.Sprint(main["image"]), security, extra...)
	c.sidecars = sidecars
	return c
}

// doctor starts the image without each documented flag in turn and checks
// that doctor names every flag that is missing, on a line of its own, and
// blames none that is there. (apparmor=unconfined is a no-op on a host
// without AppArmor, so it is never missing here.)
func (e *env) doctor(t *testing.T, image string) {
	seccomp := "seccomp=" + filepath.Join(e.repo, "images", "seccomp.json")
	cases := []struct {
		name    string
		opts    []string
		missing []string
	}{
		{"no flags", nil, []string{"seccomp", "systempaths"}},
		{"without seccomp", []string{"systempaths=unconfined", "apparmor=unconfined"}, []string{"seccomp"}},
		{"without systempaths", []string{seccomp, "apparmor=unconfined"}, []string{"systempaths"}},
		{"all flags", []string{seccomp, "systempaths=unconfined", "apparmor=unconfined"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"run", "--rm", "--label", "org.sandboxd.e2e=1"}
			for _, o := range tc.opts {
				args = append(args, "--security-opt", o)
			}
			args = append(args, "--entrypoint", "/media/sandboxd/bin/sandboxd", image, "doctor", "--json")
			out, err := dockerErr(context.Background(), args...)
			var report struct {
				OK     bool
				Checks []struct {
					Name, Detail, Fix string
					OK                bool
				}
			}
			require.NoError(t, json.Unmarshal([]byte(out), &report), "doctor --json: %v\n%s", err, out)
			if tc.missing == nil {
				assert.True(t, report.OK, "%s", out)
				assert.NoError(t, err)
				return
			}
			assert.False(t, report.OK)
			assert.Error(t, err, "doctor exits non-zero when serve would refuse")
			var failing []string
			for _, c := range report.Checks {
				if !c.OK {
					failing = append(failing, c.Name+": "+c.Fix)
				}
			}
			for _, flag := range tc.missing {
				named := 0
				for _, f := range failing {
					if strings.Contains(f, "--security-opt "+flag) {
						named++
					}
				}
				assert.NotZero(t, named, "doctor does not name the missing %s option: %v", flag, failing)
			}
			assert.GreaterOrEqual(t, len(failing), len(tc.missing), "one MISSING line per missing option: %v", failing)
			for _, flag := range []string{"seccomp", "systempaths"} {
				if !slices.Contains(tc.missing, flag) {
					for _, c := range report.Checks {
						assert.False(t, !c.OK && strings.Contains(c.Name, flag), "doctor blames %s, which is there: %v", flag, failing)
					}
				}
			}
		})
	}
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
