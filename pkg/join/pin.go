package join

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/memfd"
)

// Every joined process starts as this binary, executed from a descriptor the
// daemon holds. The file behind /proc/self/exe lies in the filesystem the
// agent shares with the substrate; the descriptor is a sealed in-memory copy
// of it that no one can write, so that what runs as root later is what was
// started.
//
// The copy (about 8 ms of CPU for this binary) need not be made before the
// agent's first session, only from contents the agent cannot have changed:
// while this process runs from the file, the kernel refuses to open it for
// writing (ETXTBSY), through any path to the file, so that its contents stay
// those that were started until the copy is made. Pin checks that refusal
// and holds the file; Seal makes the copy beside the first sessions, and a
// joined process that starts before it waits for it.
//
// The refusal does not reach a writer of the file beneath it (an overlayfs
// layer's own directory, another machine's view of a network filesystem);
// but this process's code is that file's pages, which such a writer changes
// as the process runs, so the copy never guarded against one.

var (
	selfMu sync.Mutex
	// selfFile is what joined processes start from: the sealed copy; or,
	// before Pin (tests, doctor, the visitor), the running binary itself.
	selfFile *os.File
	// heldExe is the running binary, held from Pin until Seal copies it.
	heldExe *os.File
	// sealErr is the copy's failure, every later joined process's too.
	sealErr error

	pinOnce sync.Once
	pinErr  error
)

// Pin makes sure that joined processes start as this binary as it was
// started. Where the kernel refuses writes to the running binary (on a local
// filesystem), it holds the file and leaves the copy to Seal; elsewhere it
// makes the sealed copy before it returns. Once is enough: later calls
// (another daemon in the same process, as in tests) keep the first pin,
// which joined processes may be starting from.
func Pin() error {
	pinOnce.Do(func() { pinErr = pin() })
	return pinErr
}

func pin() error {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("pin own executable: %w", err)
	}
	selfMu.Lock()
	defer selfMu.Unlock()
	heldExe = exe
	if writesRefused(exe) {
		return nil
	}
	return sealLocked()
}

// Seal makes the sealed copy that Pin left for later, once; joined processes
// that start meanwhile wait for it. Its error is theirs too.
func Seal() error {
	selfMu.Lock()
	defer selfMu.Unlock()
	return sealLocked()
}

func sealLocked() error {
	if heldExe == nil {
		return sealErr
	}
	exe := heldExe
	heldExe = nil
	defer exe.Close()
	// Nothing else reads heldExe: the copy starts at the file's start.
	pinned, err := memfd.Sealed("sandboxd", exe)
	if err != nil {
		sealErr = fmt.Errorf("pin own executable: %w", err)
		return sealErr
	}
	// An earlier selfFile stays open: a process may be starting from it.
	selfFile = pinned
	return nil
}

// writesRefused says whether the kernel refuses to open f's file for
// writing because a program runs from it (ETXTBSY): for this process's own
// executable, no one can then change its contents while this process lives.
// A read-only mount refuses with EROFS, and another mount of the same
// filesystem may be writable: that is no refusal here.
func writesRefused(f *os.File) bool {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil || !localFilesystems[int64(fs.Type)] {
		return false
	}
	// The same file, whatever has become of its path since.
	w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		w.Close()
		return false
	}
	return errors.Is(err, unix.ETXTBSY)
}

// localFilesystems are the writable local filesystems an image's binary
// lies on: a container's root (overlayfs), a host's disk, a volume. Others
// (FUSE, a network filesystem) keep the copy at start.
var localFilesystems = map[int64]bool{
	unix.EXT4_SUPER_MAGIC:      true, // ext2, ext3 and ext4 share it
	unix.XFS_SUPER_MAGIC:       true,
	unix.BTRFS_SUPER_MAGIC:     true,
	unix.OVERLAYFS_SUPER_MAGIC: true,
	unix.TMPFS_MAGIC:           true,
	unix.F2FS_SUPER_MAGIC:      true,
}

// self is the binary a joined process starts as: the sealed copy (made now,
// if Pin left it for later), or, before Pin, the running binary itself.
func self() (*os.File, error) {
	selfMu.Lock()
	defer selfMu.Unlock()
	if err := sealLocked(); err != nil {
		return nil, err
	}
	if selfFile == nil {
		f, err := os.Open("/proc/self/exe")
		if err != nil {
			return nil, err
		}
		selfFile = f
	}
	return selfFile, nil
}
