package daemon

import (
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// gradeReserveExtra is room kept for the verifier beyond two copies of the
// tests: its output and the verdict.
const gradeReserveExtra = 8 << 20

// The harness dir shares its filesystem with the agent (the container's root
// in production), and an agent that fills it would otherwise take grading
// down with it: the copy of the tests and the verdict need room. serve sets
// that room aside at start as a preallocated file, and a grading frees it
// just before it copies the tests. An agent that keeps writing while grading
// starts can still race for the freed blocks; one that filled the disk and
// stopped (a runaway build, a log) cannot cost the grade.
func (d *Daemon) reserveGradeSpace() {
	if d.cfg.Tests == "" {
		return
	}
	size := int64(gradeReserveExtra) + 2*treeSize(d.cfg.Tests)
	path := d.harnessPath("run", "grade.reserve")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		d.log.Warn("set aside room for grading", "err", err)
		return
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		os.Remove(path)
		d.log.Warn("set aside room for grading", "bytes", size, "err", err)
		return
	}
	d.reserved.Store(size)
	d.log.Debug("room set aside for grading", "bytes", size)
}

// releaseGradeSpace frees the room set aside for a grading.
func (d *Daemon) releaseGradeSpace() {
	d.reserved.Store(0)
	if err := os.Remove(d.harnessPath("run", "grade.reserve")); err != nil && !os.IsNotExist(err) {
		d.log.Warn("free the room set aside for grading", "err", err)
	}
}

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
