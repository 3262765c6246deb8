// Package visit runs a command as a visitor of the sandbox: in its user and
// network namespaces, but in a pid namespace and a root of its own, where
// the harness is covered and only the caller's binds are added. The verifier
// (pkg/grade) and the task's healthcheck are visitors, so the agent never
// sees them run, and nothing they run can see or signal the daemon.
//
//	daemon ─ visit.Run
//	  └─ a forked copy joins the holder's user and network namespaces and makes
//	     a pid namespace (join.Cmd, NewPIDNamespace)
//	       └─ "visitor", pid 1 there: unshare(CLONE_NEWNS), masks, its own root
//	          (binds of /'s entries, /tests, /logs), a fresh /proc, pivot_root,
//	          read-only /proc and /sys paths; waits for the leader, then kills
//	          what it left (everything in its pid namespace ends with it anyway)
//	            └─ the enter step (join.Here): seccomp, bounded capabilities, the
//	               user, the workdir, the exact environment
//	                 └─ the command  > output 2>&1 </dev/null
//
// The view's root is a tmpfs whose top-level entries are binds of the
// substrate's. /tests and /logs/verifier, when the caller gives them, exist
// only in that root; /logs is rebuilt there one level down. Nothing of a
// visit is made in the shared filesystem and nothing is mounted in the
// sandbox's namespace. Everything taken from the shared filesystem is opened
// once, beneath a directory descriptor, without following a symlink, and
// mounted through /proc/self/fd: a swap between two system calls changes at
// most which object of the agent's is bound, never where the caller's binds
// are. The harness dir is used only when it is the very directory the
// daemon opened, and the directories above it are mount points in the
// sandbox's view (bwrap's plan pins them), so the agent can rename none of
// them. Top-level entries the agent makes during a visit do not appear in
// the visitor's root, and writes to new top-level names go to its tmpfs
// (docs/failures.md#grading-resolves-no-name-the-agent-can-change,
// #the-verifier-can-neither-see-nor-stop-the-grader and
// #the-verifiers-dev-is-its-own).
//
// Under Harbor the verifier shares the agent's pid namespace and sees its
// processes; a visitor does not (a pid namespace that holds the agent's and
// not the daemon's would have to be the sandbox's parent, which bwrap does
// not make).
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/visit/ ./pkg/grade/ ./pkg/join/ ./test/attack/
package visit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/memfd"
	"github.com/sandboxd/sandboxd/internal/tail"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// Where Harbor's verifier finds its files, inside the visitor's view.
const (
	TestsDir   = "/tests"
	VerdictDir = "/logs/verifier"
)

// View is what a visitor sees beside the substrate's filesystem.
type View struct {
	// HarnessDir is covered by an empty read-only tmpfs, with every other
	// marked harness dir beside it (two trials on one host never see each
	// other's tests); the sources below are beneath it.
	HarnessDir string
	// Tests and Verdict are directories beneath HarnessDir bound at
	// TestsDir and VerdictDir; "" gives no /tests and an empty
	// /logs/verifier of the visitor's own (mode 0555, in its tmpfs root).
	Tests, Verdict string
	// Hosts is a file beneath HarnessDir bound read-only over /etc/hosts
	// (the substrate's hosts plus the task's peers); "" keeps the image's.
	Hosts string
	// ResolvConf is a file beneath HarnessDir bound read-only over
	// /etc/resolv.conf (the sandbox's resolver, as the agent's view has
	// it); "" keeps the image's.
	ResolvConf string
	// Mask lists more paths to cover: what the sandbox hides (the task dir
	// under trial), and on a bare host the host's sockets.
	Mask []string
	// Devices are the task's devices under /dev bound into the visitor's
	// /dev when present, as the sandbox's are (/dev/kvm, /dev/fuse, …).
	Devices []string
	// Started, if set, is told the visitor's pid (in the substrate) once it
	// runs: pid 1 of the visit's own pid namespace, by which the daemon
	// tells the visit's connections from the agent's.
	Started func(pid int) `json:"-"`
}

// Report is what the visitor says of the command. Setup is set when its view
// could not be built (sandboxd's failure); Start when the command could not
// be started, or the agent replaced what the view is built from (the
// task's, or the agent's, doing); otherwise Code and Signal are the leader's.
type Report struct {
	Setup  string `json:"setup,omitempty"`
	Start  string `json:"start,omitempty"`
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
}

// Outcome is how a visit ended.
type Outcome struct {
	Report      *Report // nil when the visitor gave no report (killed, or never got in)
	TimedOut    bool
	Interrupted error // ctx's error when the caller gave up
	Duration    time.Duration
	WaitErr     error
	Stderr      string // the end of what the visitor itself printed
}

// Run runs spec as a visitor of target with view, its stdout and stderr
// going to output, and waits for it, killing its whole pid namespace at the
// timeout or when ctx ends. A non-nil error means the visit could not be
// started at all.
func Run(ctx context.Context, target join.Target, view View, spec join.Spec, output *os.File, timeout time.Duration) (Outcome, error) {
	p, err := paramsFor(view, spec)
	if err != nil {
		return Outcome{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return Outcome{}, fmt.Errorf("visit: encode the visitor's parameters: %w", err)
	}
	paramsFile, err := memfd.New("visitor-params", raw)
	if err != nil {
		return Outcome{}, fmt.Errorf("visit: %w", err)
	}
	defer paramsFile.Close()
	resR, resW, err := os.Pipe()
	if err != nil {
		return Outcome{}, fmt.Errorf("visit: result pipe: %w", err)
	}
	defer resR.Close()

	cmd := target.Join(visitedNamespaces(target), roleVisitor)
	cmd.ExtraFiles = []*os.File{paramsFile, output, resW}
	// pid 1 of a pid namespace of its own: what it runs sees neither the
	// daemon nor anything else of the substrate, so nothing can signal the
	// grader; and when the visitor ends, the kernel ends all that was left.
	cmd.NewPIDNamespace = true
	// A visit in flight must not outlive a daemon that was killed. SIGKILL
	// reaches a namespace's pid 1 from outside it; from inside, what the
	// visitor runs can send it nothing it has not asked for.
	cmd.Pdeathsig = syscall.SIGKILL
	stderr := tail.New(4096)
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Start()
	resW.Close()
	if err != nil {
		return Outcome{}, fmt.Errorf("visit: start the visitor: %w", err)
	}
	if view.Started != nil {
		view.Started(cmd.Process.Pid)
	}

	var out Outcome
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case out.WaitErr = <-done:
	case <-timer.C:
		out.TimedOut = true
		cmd.Process.Kill() // and with it the visitor's whole pid namespace
		out.WaitErr = <-done
	case <-ctx.Done():
		out.Interrupted = ctx.Err()
		cmd.Process.Kill()
		out.WaitErr = <-done
	}
	out.Duration = time.Since(start)
	out.Stderr = stderr.String()
	if out.TimedOut || out.Interrupted != nil {
		return out, nil
	}
	// Nothing but the visitor holds the write end (it is close-on-exec
	// there), so EOF follows its exit; the deadline is a guard all the same.
	resR.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(io.LimitReader(resR, 64<<10))
	var rep Report
	if len(b) > 0 && json.Unmarshal(b, &rep) == nil {
		out.Report = &rep
	}
	return out, nil
}

// visitedNamespaces are the sandbox's namespaces a visitor joins: its user
// and network namespaces always, and the others it owns but the pid
// namespace (the visitor makes one of its own) and the mount namespace (it
// builds its own view). So the verifier shares the agent's network,
// hostname and System V IPC, as under Harbor.
func visitedNamespaces(target join.Target) []string {
	out := []string{"user", "net"}
	for _, kind := range target.Namespaces {
		if kind == "ipc" || kind == "uts" || kind == "cgroup" {
			out = append(out, kind)
		}
	}
	return out
}

// params is everything the visitor needs; it travels in a memfd so that
// none of it shows in a command line.
type params struct {
	// Harness is the harness dir as the daemon opened it: the visitor uses
	// nothing beneath it unless it finds that very directory there.
	Harness dirID `json:"harness"`
	// Tests, Verdict, Hosts and ResolvConf are relative to the harness dir
	// ("" none).
	Tests   string    `json:"tests,omitempty"`
	Verdict string    `json:"verdict,omitempty"`
	Hosts   string    `json:"hosts,omitempty"`
	Resolv  string    `json:"resolv_conf,omitempty"`
	Mask    []string  `json:"mask"`
	Devices []string  `json:"devices,omitempty"`
	Spec    join.Spec `json:"spec"`
}

// dirID names a directory and the one it must be when opened again.
type dirID struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

func paramsFor(view View, spec join.Spec) (params, error) {
	harness, err := harnessID(view.HarnessDir)
	if err != nil {
		return params{}, err
	}
	p := params{Harness: harness, Mask: otherMasks(view), Devices: view.Devices, Spec: spec}
	for _, f := range []struct {
		abs string
		rel *string
	}{{view.Tests, &p.Tests}, {view.Verdict, &p.Verdict}, {view.Hosts, &p.Hosts}, {view.ResolvConf, &p.Resolv}} {
		if *f.rel, err = beneathHarness(harness.Path, f.abs); err != nil {
			return params{}, err
		}
	}
	return p, nil
}

// harnessID opens the harness dir without following a symlink and names
// the directory it is, for the visitor to find again.
func harnessID(dir string) (dirID, error) {
	if !filepath.IsAbs(dir) {
		return dirID{}, fmt.Errorf("visit: harness dir %q must be an absolute path", dir)
	}
	fd, err := beneath.OpenDir(dir, unix.O_PATH)
	if err != nil {
		return dirID{}, fmt.Errorf("visit: harness dir: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return dirID{}, fmt.Errorf("visit: stat the harness dir: %w", err)
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
		return "", fmt.Errorf("visit: %s is not inside the harness dir %s", path, harness)
	}
	return rel, nil
}

// otherMasks lists what the visitor covers beside the harness dir itself: every
// other marked harness dir beside it, and the view's extra paths.
func otherMasks(view View) []string {
	harness := filepath.Clean(view.HarnessDir)
	var out []string
	parent := filepath.Dir(harness)
	if entries, err := os.ReadDir(parent); err == nil {
		for _, e := range entries {
			p := filepath.Join(parent, e.Name())
			if p == harness || !e.IsDir() {
				continue
			}
			if _, err := os.Lstat(filepath.Join(p, masks.HarnessMarker)); err == nil {
				out = append(out, p)
			}
		}
	}
	for _, m := range view.Mask {
		out = append(out, filepath.Clean(m))
	}
	return out
}
