package grade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/memfd"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/cleanup"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Config is one grading of one sandbox. The caller resolves the task into
// it: the verifier's user, its environment and the network variables.
type Config struct {
	Target     join.Target // the sandbox whose user and network namespaces the verifier joins
	HarnessDir string      // scratch goes to <HarnessDir>/grade/<n>/ (mode 0700), a fresh n each time
	Tests      string      // the task's tests directory to copy (the baked <harness>/tasks/<name>/tests)
	User       idmap.User  // the verifier's user
	// Env is the verifier's exact environment: the image's ENV +
	// environment.env + verifier.env, never agent.env (lesson 18), plus the
	// visitor proxy's variables when its policy lets anything out.
	Env     []string
	Workdir string        // where test.sh runs: the task's or image's workdir (lesson 44); "" = /
	Timeout time.Duration // the verifier's timeout; 0 = Harbor's default (task.DefaultVerifierTimeout)
	// Mask lists more paths the verifier must not see, beside the harness
	// dir (always masked but for the two binds) and every other marked
	// harness dir next to it: the task dir under `trial`, host sockets.
	Mask    []string
	LogsDir string // the real /logs/verifier, to copy the verdict files into afterwards; "" = do not copy
	// LogsDirDev and LogsDirIno name the directory LogsDir was when the
	// daemon started, before the agent could rename its parent and put a
	// directory of its own there: the verdict is copied only into that one.
	LogsDirDev, LogsDirIno uint64
	// Hosts, when set, is a file in the harness dir bound over /etc/hosts in
	// the verifier's view: the substrate's hosts plus the task's peers, the
	// same names the agent's view has (inside a container, Docker's DNS is
	// out of the sandbox network's reach).
	Hosts string
	Log   *slog.Logger
}

// Run grades the sandbox once: it copies the tests and makes a verdict
// directory under a fresh <HarnessDir>/grade/<n>, runs /tests/test.sh as a
// visitor, and reads the reward. Agent processes are left running (lesson
// 43). Run always returns a verdict with its Status set; a non-nil error
// means that sandboxd itself failed (the verdict then says verifier_error
// with the same message, and the CLI exits ExitInternal).
func Run(ctx context.Context, cfg Config) (Verdict, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = task.DefaultVerifierTimeout
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	internal := func(err error) (Verdict, error) {
		return Verdict{Status: StatusError, ExitCode: -1, Message: err.Error()}, err
	}
	switch {
	case cfg.Target.PID <= 0:
		return internal(errors.New("grade: no sandbox to grade (is sandboxd serving?)"))
	case !filepath.IsAbs(cfg.HarnessDir):
		return internal(fmt.Errorf("grade: harness dir %q must be an absolute path", cfg.HarnessDir))
	case !filepath.IsAbs(cfg.Tests):
		return internal(fmt.Errorf("grade: tests dir %q must be an absolute path", cfg.Tests))
	}
	// A task without a usable test.sh is the task's problem, found before
	// anything is made (nothing half-done is left behind).
	if msg := checkTests(cfg.Tests); msg != "" {
		return Verdict{Status: StatusError, ExitCode: -1, Message: msg}, nil
	}

	ws, err := prepare(cfg, log)
	if err != nil {
		return internal(err)
	}
	defer ws.close(log)
	log = log.With("grade", ws.n)

	harness, err := harnessID(cfg.HarnessDir)
	if err != nil {
		return internal(err)
	}
	hosts, err := beneathHarness(cfg.HarnessDir, cfg.Hosts)
	if err != nil {
		return internal(err)
	}
	params := visitorParams{
		Harness:   harness,
		Workspace: filepath.Join("grade", strconv.Itoa(ws.n)),
		Mask:      masks(cfg),
		Hosts:     hosts,
		Spec:      join.Spec{User: cfg.User, Env: cfg.Env, Dir: cfg.Workdir, Argv: []string{"/" + testsDir + "/test.sh"}},
	}
	log.Info("grade: verifier starting", "dir", ws.dir, "uid", cfg.User.UID, "gid", cfg.User.GID, "workdir", cfg.Workdir, "timeout", timeout)
	run, err := runVisitor(ctx, cfg.Target, params, ws.output, timeout)
	if err != nil {
		return internal(err)
	}

	v := Verdict{ExitCode: -1, DurationSec: run.duration.Seconds()}
	switch {
	case run.interrupted != nil:
		v.Status = StatusError
		v.Message = fmt.Sprintf("grading was interrupted (%v); the verifier was killed", run.interrupted)
		err = run.interrupted
	case run.timedOut:
		v.Status = StatusTimeout
		v.Message = fmt.Sprintf("the verifier ran longer than its timeout of %s and was killed with everything it started", timeout)
	case run.result == nil:
		v.Status = StatusError
		err = fmt.Errorf("grade: the visitor ended without a report (%v); could it enter the sandbox? %s", run.waitErr, run.stderr)
		v.Message = err.Error()
	case run.result.Setup != "":
		v.Status = StatusError
		err = fmt.Errorf("grade: build the verifier's view: %s", run.result.Setup)
		v.Message = err.Error()
	case run.result.Start != "":
		v.Status = StatusError
		v.Message = "could not start /tests/test.sh: " + run.result.Start
	default:
		v.ExitCode = run.result.Code
		v.Reward, v.Status, v.Message = readReward(ws.verdict)
	}
	v.StdoutTail = readTail(ws.output)
	if cfg.LogsDir != "" {
		if cerr := copyOut(ws.verdict, cfg.LogsDir, cfg.LogsDirDev, cfg.LogsDirIno, log); cerr != nil {
			log.Warn("grade: copy the verdict files to the logs dir", "logs_dir", cfg.LogsDir, "err", cerr)
		}
	}
	log.Info("grade: verdict", "status", v.Status, "reward", v.Reward, "exit_code", v.ExitCode, "duration_sec", v.DurationSec)
	return v, err
}

// checkTests says what is wrong with the task's tests directory, or "".
func checkTests(dir string) string {
	fd, err := openDir(dir, unix.O_PATH)
	if err != nil {
		return fmt.Sprintf("the task's tests directory cannot be used: %v", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	switch err := unix.Fstatat(fd, "test.sh", &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return fmt.Sprintf("tests/test.sh is missing from %s: every Harbor task needs its verifier there", dir)
	case err != nil:
		return fmt.Sprintf("tests/test.sh in %s: %v", dir, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Sprintf("tests/test.sh in %s is not a regular file: make it the verifier script itself", dir)
	}
	return ""
}

// workspace is one grading's directory in the harness: <harness>/grade/<n>
// with tests/ (the copy) and verdict/ (what the verifier sees as
// /logs/verifier), both the verifier's.
type workspace struct {
	n       int
	dir     string
	verdict int      // verdict/, opened by us: readings go through it, never by path
	output  *os.File // verdict/test-stdout.txt, which we made and read back
}

func prepare(cfg Config, log *slog.Logger) (*workspace, error) {
	own := owner{uid: int(cfg.User.UID), gid: int(cfg.User.GID)}
	hfd, err := openDir(cfg.HarnessDir, unix.O_PATH)
	if err != nil {
		return nil, fmt.Errorf("grade: harness dir: %w", err)
	}
	defer unix.Close(hfd)
	if err := unix.Mkdirat(hfd, "grade", 0o700); err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("grade: create %s/grade: %w", cfg.HarnessDir, err)
	}
	gfd, err := unix.Openat(hfd, "grade", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("grade: open %s/grade: %w", cfg.HarnessDir, noFollowErr(err))
	}
	defer unix.Close(gfd)
	names, err := readDirNames(gfd)
	if err != nil {
		return nil, fmt.Errorf("grade: list %s/grade: %w", cfg.HarnessDir, err)
	}
	// Mkdir is the claim: two gradings at once never share a directory (lesson 46).
	n := nextNumber(names)
	for ; ; n++ {
		err := unix.Mkdirat(gfd, strconv.Itoa(n), 0o700)
		if err == nil {
			break
		}
		if err != unix.EEXIST {
			return nil, fmt.Errorf("grade: create %s/grade/%d: %w", cfg.HarnessDir, n, err)
		}
	}
	ws := &workspace{n: n, dir: filepath.Join(cfg.HarnessDir, "grade", strconv.Itoa(n)), verdict: -1}
	cu := cleanup.Make(func() { ws.close(log); os.RemoveAll(ws.dir) })
	defer cu.Clean()
	nfd, err := unix.Openat(gfd, strconv.Itoa(n), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("grade: open %s: %w", ws.dir, err)
	}
	defer unix.Close(nfd)

	src, err := openDir(cfg.Tests, unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("grade: tests: %w", err)
	}
	defer unix.Close(src)
	var sst unix.Stat_t
	if err := unix.Fstat(src, &sst); err != nil {
		return nil, fmt.Errorf("grade: stat %s: %w", cfg.Tests, err)
	}
	if err := unix.Mkdirat(nfd, "tests", 0o700); err != nil {
		return nil, fmt.Errorf("grade: create %s/tests: %w", ws.dir, err)
	}
	tfd, err := unix.Openat(nfd, "tests", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("grade: open %s/tests: %w", ws.dir, err)
	}
	defer unix.Close(tfd)
	if err := copyTree(src, tfd, own, "tests", log); err != nil {
		return nil, fmt.Errorf("grade: copy the tests from %s: %w", cfg.Tests, err)
	}
	if err := chownChmod(tfd, sst.Mode&0o1777|0o500, own, "tests"); err != nil {
		return nil, fmt.Errorf("grade: %w", err)
	}

	if err := unix.Mkdirat(nfd, "verdict", 0o700); err != nil {
		return nil, fmt.Errorf("grade: create %s/verdict: %w", ws.dir, err)
	}
	ws.verdict, err = unix.Openat(nfd, "verdict", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("grade: open %s/verdict: %w", ws.dir, err)
	}
	if err := chownChmod(ws.verdict, 0o755, own, "verdict"); err != nil {
		return nil, fmt.Errorf("grade: %w", err)
	}
	// Harbor's verifier writes test-stdout.txt itself; here the daemon
	// makes it and hands it over, so it can read the tail back through its
	// own descriptor whatever the verifier does to the name.
	ofd, err := unix.Openat(ws.verdict, "test-stdout.txt", unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("grade: create %s/verdict/test-stdout.txt: %w", ws.dir, err)
	}
	ws.output = os.NewFile(uintptr(ofd), "test-stdout.txt")
	if err := unix.Fchown(ofd, own.uid, own.gid); err != nil {
		return nil, fmt.Errorf("grade: chown test-stdout.txt: %w", err)
	}
	cu.Release()
	return ws, nil
}

// close releases the descriptors and removes the copy of the tests, which
// nobody needs once the verifier is gone; the verdict directory stays as
// the record of this grading.
func (ws *workspace) close(log *slog.Logger) {
	if ws.output != nil {
		ws.output.Close()
		ws.output = nil
	}
	if ws.verdict >= 0 {
		unix.Close(ws.verdict)
		ws.verdict = -1
	}
	if err := os.RemoveAll(filepath.Join(ws.dir, "tests")); err != nil {
		log.Warn("grade: remove the copy of the tests", "dir", ws.dir, "err", err)
	}
}

// masks lists what the visitor covers beside the harness dir itself: every
// other marked harness dir beside it (two trials on one host never see each
// other's tests), and the caller's extra paths.
func masks(cfg Config) []string {
	harness := filepath.Clean(cfg.HarnessDir)
	var out []string
	parent := filepath.Dir(harness)
	if entries, err := os.ReadDir(parent); err == nil {
		for _, e := range entries {
			p := filepath.Join(parent, e.Name())
			if p == harness || !e.IsDir() {
				continue
			}
			if _, err := os.Lstat(filepath.Join(p, bwrap.HarnessMarker)); err == nil {
				out = append(out, p)
			}
		}
	}
	for _, m := range cfg.Mask {
		out = append(out, filepath.Clean(m))
	}
	return out
}

// harnessID opens the harness dir without following a symlink and names
// the directory it is, for the visitor to find again.
func harnessID(dir string) (dirID, error) {
	fd, err := openDir(dir, unix.O_PATH)
	if err != nil {
		return dirID{}, fmt.Errorf("grade: harness dir: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return dirID{}, fmt.Errorf("grade: stat the harness dir: %w", err)
	}
	return dirID{Path: filepath.Clean(dir), Dev: st.Dev, Ino: st.Ino}, nil
}

// beneathHarness is path relative to the harness dir ("" stays "").
func beneathHarness(harness, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	rel, err := filepath.Rel(harness, path)
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("grade: %s is not inside the harness dir %s", path, harness)
	}
	return rel, nil
}

// visitorRun is how the visitor ended.
type visitorRun struct {
	result      *visitorResult // nil when it gave no report (killed, or never got in)
	timedOut    bool
	interrupted error // ctx's error when the caller gave up
	duration    time.Duration
	waitErr     error
	stderr      string
}

// runVisitor starts the visitor in the sandbox's user and network
// namespaces and waits for its report, killing its whole tree — all of it in
// the substrate's pid namespace — at the timeout.
func runVisitor(ctx context.Context, target join.Target, params visitorParams, output *os.File, timeout time.Duration) (visitorRun, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return visitorRun{}, fmt.Errorf("grade: encode visitor parameters: %w", err)
	}
	paramsFile, err := memfd.New("visitor-params", raw)
	if err != nil {
		return visitorRun{}, fmt.Errorf("grade: %w", err)
	}
	defer paramsFile.Close()
	resR, resW, err := os.Pipe()
	if err != nil {
		return visitorRun{}, fmt.Errorf("grade: result pipe: %w", err)
	}
	defer resR.Close()

	cmd := target.Join([]string{"user", "net"}, roleVisitor)
	cmd.ExtraFiles = []*os.File{paramsFile, output, resW}
	// pid 1 of a pid namespace of its own: the verifier sees neither the
	// daemon nor anything else of the substrate, so nothing it runs can
	// signal the grader; and when the visitor ends, the kernel ends all
	// that the verifier left.
	cmd.NewPIDNamespace = true
	// A verifier in flight must not outlive a daemon that was killed.
	// SIGKILL reaches a namespace's pid 1 from outside it; from inside,
	// the verifier can send it nothing it has not asked for.
	cmd.Pdeathsig = syscall.SIGKILL
	stderr := &tail{}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Start()
	resW.Close()
	if err != nil {
		return visitorRun{}, fmt.Errorf("grade: start the visitor: %w", err)
	}

	var run visitorRun
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case run.waitErr = <-done:
	case <-timer.C:
		run.timedOut = true
		cmd.Process.Kill() // and with it the visitor's whole pid namespace
		run.waitErr = <-done
	case <-ctx.Done():
		run.interrupted = ctx.Err()
		cmd.Process.Kill()
		run.waitErr = <-done
	}
	run.duration = time.Since(start)
	run.stderr = stderr.String()
	if run.timedOut || run.interrupted != nil {
		return run, nil
	}
	// Nothing but the visitor holds the write end (it is close-on-exec
	// there), so EOF follows its exit; the deadline is a guard all the same.
	resR.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(io.LimitReader(resR, 64<<10))
	var res visitorResult
	if len(b) > 0 && json.Unmarshal(b, &res) == nil {
		run.result = &res
	}
	return run, nil
}

// tail keeps the last few KiB a helper printed, for error messages.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }
