package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

// RootfsMarker is the file in the harness dir that says this root
// filesystem has been an agent's. serve writes it once its sandbox is
// ready, before the entrypoint or any session runs there; the harness dir
// is never in the agent's view, so no agent removes it. Once it exists,
// every program serve and doctor would run as root outside a sandbox —
// bwrap, its dynamic loader and libraries, /bin/sh as bwrap's payload —
// may be the agent's (docs/failures.md#a-used-root-filesystem-runs-nothing-as-root).
const RootfsMarker = "rootfs-used"

// ErrRootfsUsed means the harness dir says its root filesystem has been an
// agent's.
var ErrRootfsUsed = errors.New("this root filesystem has already been an agent's")

// RootfsUse is what the marker records, for the refusal's message.
type RootfsUse struct {
	Since    time.Time `json:"since"`
	PID      int       `json:"pid"`
	Sandboxd string    `json:"sandboxd"`
	Task     string    `json:"task,omitempty"`
	HostMode bool      `json:"host_mode,omitempty"`
}

// CheckRootfs refuses a start on a root filesystem that has been an
// agent's, before any program of it is run; with reuse it says, for
// status, what serving anyway means.
func CheckRootfs(harness string, reuse, hostMode bool) (degradations []string, err error) {
	used := rootfsUsed(harness)
	if used == "" {
		return nil, nil
	}
	if !reuse {
		fresh := "Start a fresh container from the image (docker rm, then docker run; not docker restart or a restart policy)"
		if hostMode {
			fresh = "On a host, give serve a fresh --harness-dir (a trial makes one when given none), knowing that the host's files are the last agent's to have changed"
		}
		return nil, fmt.Errorf("%w (%s): bwrap, its dynamic loader and libraries and /bin/sh may be that agent's now, and serve would run them as root outside any sandbox. "+
			"%s. For development only, serve --reuse-rootfs starts anyway", ErrRootfsUsed, used, fresh)
	}
	return []string{fmt.Sprintf("root filesystem reused (--reuse-rootfs): %s, so bwrap, its libraries and /bin/sh may be that agent's, and they ran as root", used)}, nil
}

// rootfsUsed says when, and by which serve, the root filesystem became an
// agent's; "" when the marker is absent. A marker that cannot be read
// still counts.
func rootfsUsed(harness string) string {
	path := filepath.Join(harness, RootfsMarker)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, lerr := os.Lstat(path); lerr != nil {
			return ""
		}
	}
	var use RootfsUse
	if err != nil || json.Unmarshal(b, &use) != nil || use.Since.IsZero() {
		return fmt.Sprintf("%s says an agent has had it", path)
	}
	what := "a serve"
	if use.Task != "" {
		what += " of task " + use.Task
	}
	return fmt.Sprintf("%s, pid %d, sandboxd %s, made its sandbox ready on it at %s, as %s records", what, use.PID, use.Sandboxd, use.Since.UTC().Format(time.RFC3339), path)
}

// MarkRootfs writes the marker into the harness dir, durably, before
// anything of the agent's runs in the sandbox. A marker already there (a
// serve with --reuse-rootfs) keeps the first use.
func MarkRootfs(dir string, use RootfsUse) error {
	b, _ := json.Marshal(use)
	path := filepath.Join(dir, RootfsMarker)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark the root filesystem as the agent's: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mark the root filesystem as the agent's: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// doctorWait bounds how long serve waits for doctors that hold its lock.
const doctorWait = time.Minute

// lockServe takes serve's lock: exclusive, and never beside another
// serve. A doctor holds the same lock shared while it runs the image's
// bwrap (HoldForDoctor); serve waits for doctors, up to doctorWait. A
// shared lock is granted beside doctors only, never beside a serve's
// exclusive one: that is how the two are told apart.
func lockServe(f *os.File) error {
	fd := int(f.Fd())
	deadline := time.Now().Add(doctorWait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK {
			return err
		}
		doctors := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) == nil
		unix.Flock(fd, unix.LOCK_UN)
		if !doctors || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HoldForDoctor takes the harness dir for `sandboxd doctor` before it runs
// any program of the image: serve's lock, shared, so that no serve starts
// while doctor runs bwrap. It refuses with ErrLocked while a serve holds
// the dir, and with ErrRootfsUsed once the root filesystem has been an
// agent's: the image's bwrap, its libraries and its /bin/sh may then be
// the agent's, and doctor runs them as root. It makes the harness dir if
// there is none, as serve would.
func HoldForDoctor(harnessDir string) (release func(), err error) {
	harness, err := bwrap.RealPath(harnessDir)
	if err != nil {
		return nil, fmt.Errorf("harness dir: %w", err)
	}
	if err := Prepare(harness); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(harness, "run", "serve.lock"), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("%w (%s): doctor runs no program of the image beside it", ErrLocked, harness)
		}
		return nil, fmt.Errorf("lock %s: %w", harness, err)
	}
	if used := rootfsUsed(harness); used != "" {
		f.Close()
		return nil, fmt.Errorf("%w (%s): doctor runs no program of the image, since bwrap, its libraries and /bin/sh may be that agent's; run doctor in a fresh container from the image", ErrRootfsUsed, used)
	}
	return func() { f.Close() }, nil
}
