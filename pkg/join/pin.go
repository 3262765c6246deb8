package join

import (
	"fmt"
	"os"
	"sync"

	"github.com/sandboxd/sandboxd/internal/memfd"
)

// Every joined process starts as this binary, executed from a descriptor the
// daemon holds. The file behind /proc/self/exe lies in the filesystem the
// agent shares with the substrate; Pin, called at start before any agent
// code runs, replaces it with a sealed in-memory copy that no one can write,
// so that what runs as root later is what was started.

var (
	selfMu   sync.Mutex
	selfFile *os.File
)

// Pin copies this binary into a sealed memfd and uses the copy from now on.
func Pin() error {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("pin own executable: %w", err)
	}
	defer exe.Close()
	pinned, err := memfd.Sealed("sandboxd", exe)
	if err != nil {
		return fmt.Errorf("pin own executable: %w", err)
	}
	selfMu.Lock()
	defer selfMu.Unlock()
	if selfFile != nil {
		selfFile.Close()
	}
	selfFile = pinned
	return nil
}

// self is the binary a joined process starts as: the pinned copy, or, before
// Pin (tests, doctor, the visitor), the running binary itself.
func self() (*os.File, error) {
	selfMu.Lock()
	defer selfMu.Unlock()
	if selfFile == nil {
		f, err := os.Open("/proc/self/exe")
		if err != nil {
			return nil, err
		}
		selfFile = f
	}
	return selfFile, nil
}
