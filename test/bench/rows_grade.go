package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// benchGrade: `sandboxd grade` on a tiny task against running its test.sh
// directly. The script writes its reward where it is told (the verdict
// directory under grade, a temporary one when run directly), so the two do
// the same work; the difference is what grading costs: a fresh copy of the
// tests, the visitor's own mount namespace, dropping privileges, the
// verdict, and the CLI's round trip through the control socket.
func benchGrade(ctx context.Context, b *bench) error {
	taskDir := filepath.Join(b.tmp, "task")
	if err := os.MkdirAll(filepath.Join(taskDir, "tests"), 0o755); err != nil {
		return err
	}
	toml := `schema_version = "1.1"

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 60.0
`
	script := "#!/bin/bash\necho 1 > \"${BENCH_VERIFIER_DIR:-/logs/verifier}/reward.txt\"\n"
	if err := os.WriteFile(filepath.Join(taskDir, "task.toml"), []byte(toml), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(taskDir, "instruction.md"), []byte("Nothing to do.\n"), 0o644); err != nil {
		return err
	}
	testSh := filepath.Join(taskDir, "tests", "test.sh")
	if err := os.WriteFile(testSh, []byte(script), 0o755); err != nil {
		return err
	}
	verdict := filepath.Join(b.tmp, "verdict-direct")
	if err := os.MkdirAll(verdict, 0o755); err != nil {
		return err
	}
	d, err := b.startDaemon(ctx, "grade", "--task", taskDir, "--listen", "")
	if err != nil {
		return err
	}
	defer d.p.Stop(10 * time.Second)
	direct := func() (float64, error) {
		cmd := exec.Command(testSh)
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), "BENCH_VERIFIER_DIR="+verdict)
		return timeRun(cmd)
	}
	grade := func() (float64, error) {
		return timeRun(exec.Command(b.opt.sandboxd, "grade", "--harness-dir", d.harness, "--json"))
	}
	s, err := alternate(ctx, 2, pick(b, 30, 5), direct, grade)
	if err != nil {
		return err
	}
	r := b.addPair("grade", "`sandboxd grade` of a one-line test.sh", "ms", "`tests/test.sh` run directly", s, 0, true)
	r.detail = fmt.Sprintf("overhead %.1f ms per grading (median difference); the CLI's wall time, verdict JSON included", r.ours-r.peerV)
	return nil
}
