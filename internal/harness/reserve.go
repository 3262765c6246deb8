package harness

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// gradeReserveExtra is room kept for the verifier beyond two copies of the
// tests: its output and the verdict.
const gradeReserveExtra = 8 << 20

// ReserveGradeSpace sets aside room for a grading of tests, as a
// preallocated file in the harness dir, and returns its size.
//
// The harness dir shares its filesystem with the agent (the container's root
// in production), and an agent that fills it would otherwise take grading
// down with it: the copy of the tests and the verdict need room. serve sets
// that room aside at start, and a grading frees it (ReleaseGradeSpace) just
// before it copies the tests. An agent that keeps writing while grading
// starts can still race for the freed blocks; one that filled the disk and
// stopped (a runaway build, a log) cannot cost the grade.
func ReserveGradeSpace(dir, tests string) (int64, error) {
	size := int64(gradeReserveExtra) + 2*treeSize(tests)
	path := gradeReserve(dir)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, fmt.Errorf("set aside room for grading: %w", err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		os.Remove(path)
		return 0, fmt.Errorf("set aside %d bytes for grading: %w", size, err)
	}
	return size, nil
}

// ReleaseGradeSpace frees the room ReserveGradeSpace set aside.
func ReleaseGradeSpace(dir string) error {
	if err := os.Remove(gradeReserve(dir)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("free the room set aside for grading: %w", err)
	}
	return nil
}

func gradeReserve(dir string) string { return filepath.Join(dir, "run", "grade.reserve") }

// treeSize is the bytes of the regular files below dir.
func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
