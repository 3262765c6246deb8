package grade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
	"github.com/sandboxd/sandboxd/internal/cleanup"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/task"
	"github.com/sandboxd/sandboxd/pkg/visit"
)

// Config is one grading of one sandbox. The caller resolves the task into
// it: the verifier's user, its environment and the network variables.
type Config struct {
	Target     join.Target // the sandbox whose user and network namespaces the verifier joins
	HarnessDir string      // scratch goes to <HarnessDir>/grade/<n>/ (mode 0700), a fresh n each time
	Tests      string      // the task's tests directory to copy (the baked <harness>/tasks/<name>/tests)
	User       idmap.User  // the verifier's user
	// Env is the verifier's exact environment: the image's ENV +
	// environment.env + verifier.env, never agent.env
	// (docs/failures.md#verifier-environment-is-its-own), plus the visitor
	// proxy's variables when its policy lets anything out.
	Env     []string
	Workdir string        // where test.sh runs: the task's or image's workdir (docs/failures.md#test-script-runs-in-the-workdir); "" = /
	Timeout time.Duration // the verifier's timeout; 0 = Harbor's default (task.DefaultVerifierTimeout)
	// Mask lists more paths the verifier must not see, beside the harness
	// dir (always masked but for the two binds) and every other marked
	// harness dir next to it: the task dir under `trial`, host sockets.
	Mask []string
	// Devices are the task's devices bound into the verifier's /dev, as
	// into the sandbox's (bwrap.Config.Devices).
	Devices []string
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
	// ResolvConf, when set, is a file in the harness dir bound over
	// /etc/resolv.conf in the verifier's view: the sandbox's resolver.
	ResolvConf string
	// Started, if set, is told the verifier's pid once it runs (see
	// visit.View.Started).
	Started func(pid int)
	Log     *slog.Logger
}

// Run grades the sandbox once: it copies the tests and makes a verdict
// directory under a fresh <HarnessDir>/grade/<n>, runs /tests/test.sh as a
// visitor, and reads the reward. Agent processes are left running
// (docs/failures.md#verifier-sees-agent-servers). Run always returns a verdict
// with its Status set; a non-nil error
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

	view := visit.View{
		HarnessDir: cfg.HarnessDir,
		Tests:      filepath.Join(ws.dir, "tests"),
		Verdict:    filepath.Join(ws.dir, "verdict"),
		Hosts:      cfg.Hosts,
		ResolvConf: cfg.ResolvConf,
		Mask:       cfg.Mask,
		Devices:    cfg.Devices,
		Started:    cfg.Started,
	}
	spec := join.Spec{User: cfg.User, Env: cfg.Env, Dir: cfg.Workdir, Argv: []string{visit.TestsDir + "/test.sh"}}
	log.Info("grade: verifier starting", "dir", ws.dir, "uid", cfg.User.UID, "gid", cfg.User.GID, "workdir", cfg.Workdir, "timeout", timeout)
	run, err := visit.Run(ctx, cfg.Target, view, spec, ws.output, timeout)
	if err != nil {
		return internal(err)
	}

	v := Verdict{ExitCode: -1, DurationSec: run.Duration.Seconds()}
	switch {
	case run.Interrupted != nil:
		v.Status = StatusError
		v.Message = fmt.Sprintf("grading was interrupted (%v); the verifier was killed", run.Interrupted)
		err = run.Interrupted
	case run.TimedOut:
		v.Status = StatusTimeout
		v.Message = fmt.Sprintf("the verifier ran longer than its timeout of %s and was killed with everything it started", timeout)
	case run.Report == nil:
		v.Status = StatusError
		err = fmt.Errorf("grade: the visitor ended without a report (%v); could it enter the sandbox? %s", run.WaitErr, run.Stderr)
		v.Message = err.Error()
	case run.Report.Setup != "":
		v.Status = StatusError
		err = fmt.Errorf("grade: build the verifier's view: %s", run.Report.Setup)
		v.Message = err.Error()
	case run.Report.Start != "":
		v.Status = StatusError
		v.Message = "could not start /tests/test.sh: " + run.Report.Start
	default:
		v.ExitCode = run.Report.Code
		v.Reward, v.Status, v.Message = readReward(ws.verdict)
	}
	v.StdoutTail = visit.Tail(ws.output)
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
	fd, err := beneath.OpenDir(dir, unix.O_PATH)
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
	hfd, err := beneath.OpenDir(cfg.HarnessDir, unix.O_PATH)
	if err != nil {
		return nil, fmt.Errorf("grade: harness dir: %w", err)
	}
	defer unix.Close(hfd)
	if err := unix.Mkdirat(hfd, "grade", 0o700); err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("grade: create %s/grade: %w", cfg.HarnessDir, err)
	}
	gfd, err := unix.Openat(hfd, "grade", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("grade: open %s/grade: %w", cfg.HarnessDir, beneath.NoFollowErr(err))
	}
	defer unix.Close(gfd)
	names, err := beneath.ReadDirNames(gfd)
	if err != nil {
		return nil, fmt.Errorf("grade: list %s/grade: %w", cfg.HarnessDir, err)
	}
	// Mkdir is the claim: two gradings at once never share a directory
	// (docs/failures.md#concurrent-visitors-share-nothing).
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

	src, err := beneath.OpenDir(cfg.Tests, unix.O_RDONLY)
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
