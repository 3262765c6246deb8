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

	pinOnce sync.Once
	pinErr  error
)

// Pin copies this binary into a sealed memfd and uses the copy from now on.
// Once is enough: later calls (another daemon in the same process, as in
// tests) keep the first copy, which joined processes may be starting from.
func Pin() error {
	pinOnce.Do(func() {
		exe, err := os.Open("/proc/self/exe")
		if err != nil {
			pinErr = fmt.Errorf("pin own executable: %w", err)
			return
		}
		defer exe.Close()
		pinned, err := memfd.Sealed("sandboxd", exe)
		if err != nil {
			pinErr = fmt.Errorf("pin own executable: %w", err)
			return
		}
		selfMu.Lock()
		defer selfMu.Unlock()
		// The unpinned file stays open: a process may be starting from it.
		selfFile = pinned
	})
	return pinErr
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
