package grade

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

// Where Harbor's verifier finds its files, inside the visitor's view.
const (
	testsMount   = "/tests"
	verdictMount = "/logs/verifier"
)

// testsDirMode marks a /tests directory that a grader made, so the last
// grader to finish removes it and a /tests that was there before is kept.
const testsDirMode = 0o555

// mountPoint is the empty /tests directory in the shared filesystem that a
// visitor binds its copy of the tests onto. It exists only while some
// visitor needs it (lesson 13: a /tests outside grading tells the agent it
// is being graded).
//
// Visitors may overlap (grading twice at once, two trials on one host), and
// removing a directory in the substrate detaches whatever another mount
// namespace has mounted on it. So every visitor holds a shared flock on the
// directory for as long as it runs, and the last one out — the one that
// gets the lock exclusively — removes it, if it is still the empty
// directory a grader made.
type mountPoint struct {
	fd       int
	dev, ino uint64
	locked   bool
}

// acquireTestsDir makes /tests (unless it exists) and holds it.
func acquireTestsDir(ctx context.Context, log *slog.Logger) (*mountPoint, error) {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	defer unix.Close(root)
	const name = "tests"
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		created := false
		switch err := unix.Mkdirat(root, name, testsDirMode); err {
		case nil:
			created = true
		case unix.EEXIST:
		default:
			return nil, fmt.Errorf("create the %s mount point in the shared filesystem: %w", testsMount, err)
		}
		fd, err := unix.Openat(root, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			continue // another grader removed it just now
		}
		if err != nil {
			return nil, fmt.Errorf("open the %s mount point in the shared filesystem: %w", testsMount, noFollowErr(err))
		}
		if created {
			unix.Fchmod(fd, testsDirMode) // whatever the umask took away
		}
		mp := &mountPoint{fd: fd}
		switch err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); {
		case err == nil:
			mp.locked = true
		case err == unix.EWOULDBLOCK && time.Now().Before(deadline):
			// The last grader out is removing it; start over once it is gone.
			unix.Close(fd)
			time.Sleep(10 * time.Millisecond)
			continue
		case err == unix.EWOULDBLOCK:
			// Something else holds it exclusively (the agent can open and
			// lock the directory): go ahead without the lock and leave the
			// directory in place afterwards.
			log.Warn("grade: /tests is locked by another process; it will not be removed after grading")
		default:
			unix.Close(fd)
			return nil, fmt.Errorf("lock the %s mount point: %w", testsMount, err)
		}
		var st, now unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			mp.release(log)
			return nil, fmt.Errorf("stat the %s mount point: %w", testsMount, err)
		}
		if err := unix.Fstatat(root, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
			// Removed or replaced between open and lock: take whatever is there now.
			unix.Close(fd)
			continue
		}
		mp.dev, mp.ino = st.Dev, st.Ino
		return mp, nil
	}
}

// release lets go of /tests and removes it when no other visitor holds it
// and it is still the empty directory a grader made.
func (mp *mountPoint) release(log *slog.Logger) {
	defer unix.Close(mp.fd)
	if !mp.locked || unix.Flock(mp.fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		log.Debug("grade: /tests stays: another visitor holds it")
		return
	}
	var st unix.Stat_t
	err := unix.Fstatat(unix.AT_FDCWD, testsMount, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil || st.Dev != mp.dev || st.Ino != mp.ino || st.Mode != unix.S_IFDIR|testsDirMode || st.Uid != 0 {
		log.Debug("grade: /tests stays: not the empty directory a grader made", "mode", fmt.Sprintf("%#o", st.Mode), "uid", st.Uid, "err", err)
		return
	}
	if err := unix.Rmdir(testsMount); err != nil {
		log.Warn("grade: could not remove the /tests mount point", "err", err)
	}
}
