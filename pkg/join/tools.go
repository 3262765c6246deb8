package join

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// The daemon runs nsenter for every session, long after the agent has had
// the run of the root filesystem it shares with the substrate. An nsenter
// looked up on PATH at that point could be one the agent planted earlier in
// PATH, or rewrote in place, and would run as the container's root. So the
// daemon pins it at start, before any agent code runs: a private copy in the
// harness dir, which the sandbox cannot see.
//
// Residual risk, documented in docs/security.md: nsenter is dynamically
// linked, and the loader still reads the shared filesystem's libraries and
// /etc/ld.so.preload when the copy runs.
var (
	toolsMu sync.Mutex
	nsenter string
)

// PinTools copies nsenter into dir (created 0700) and uses that copy from now on.
func PinTools(dir string) error {
	src, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("nsenter not found: install util-linux")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin nsenter: %w", err)
	}
	dst := filepath.Join(dir, "nsenter")
	if err := copyExecutable(src, dst); err != nil {
		return fmt.Errorf("pin nsenter: %w", err)
	}
	toolsMu.Lock()
	nsenter = dst
	toolsMu.Unlock()
	return nil
}

// Nsenter is the nsenter to run: the pinned copy, or, before PinTools (tests,
// doctor), the one on PATH.
func Nsenter() (string, error) {
	toolsMu.Lock()
	pinned := nsenter
	toolsMu.Unlock()
	if pinned != "" {
		return pinned, nil
	}
	p, err := exec.LookPath("nsenter")
	if err != nil {
		return "", fmt.Errorf("nsenter not found: install util-linux")
	}
	return p, nil
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return err
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}
