package sandboxtest

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InView is path as the daemon reaches it in the sandbox's own view: through
// the holder's root, where the sandbox's mounts (its tmpfs copies of
// hidden paths' directories) are.
func (s *Sandbox) InView(path string) string {
	return filepath.Join("/proc", strconv.Itoa(s.Holder.PID), "root", path)
}

// ReleaseFIFOAtCleanup opens the FIFO at path for writing, without blocking,
// when the test ends (before the cleanups registered earlier, such as a
// server's Close that waits for its sessions): a reader stuck opening it — the
// bug a test pins, when it is there — goes on, and the test binary is left
// with no thread waiting forever. It goes on while it finds a reader there
// (the open fails with ENXIO once none is left), for at most a second.
func ReleaseFIFOAtCleanup(t testing.TB, path string) {
	t.Cleanup(func() {
		for range 10 {
			fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return
			}
			unix.Close(fd)
			time.Sleep(100 * time.Millisecond)
		}
	})
}
