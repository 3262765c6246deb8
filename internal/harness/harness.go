// Package harness keeps the harness dir: the daemon's own state beside the
// sandbox, which no agent ever sees. Its skeleton and lock, the control
// socket, the marker that says the root filesystem has been an agent's, and
// the room set aside for grading.
package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/masks"
)

// ErrLocked means another serve owns the harness dir.
var ErrLocked = errors.New("another sandboxd serve owns this harness dir")

// Prepare creates the harness dir's skeleton, marked so that every
// sandbox on this machine hides it.
func Prepare(dir string) error {
	if filepath.Dir(dir) == "/" {
		return fmt.Errorf("harness dir %s is directly under /, where it cannot be hidden: use a path one level deeper, such as /media/sandboxd", dir)
	}
	for _, sub := range []string{"", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return fmt.Errorf("create harness dir: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "run"), 0o700); err != nil {
		return err
	}
	marker := filepath.Join(dir, masks.HarnessMarker)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return fmt.Errorf("mark harness dir: %w", err)
	}
	return nil
}

// Lock keeps a second serve off the same harness dir. The kernel
// drops the lock when its owner dies, so a crash leaves no stale lock; what
// refuses the next start on a root filesystem an agent has had is
// RootfsMarker.
func Lock(runDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(runDir, "serve.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := lockServe(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w (%s): stop it with `sandboxd stop`, or give this one another --harness-dir", ErrLocked, runDir)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// ListenControl listens on the control socket at path, mode 0600 from
// its first moment.
func ListenControl(path string) (net.Listener, error) {
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
