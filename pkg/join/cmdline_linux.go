package join

import (
	"errors"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/internal/procfs"
)

// BlankCommandLine overwrites this process's argv area with "sandboxd".
// That area is what /proc/PID/cmdline shows, for the daemon and for each
// copy it forks into the sandbox's pid namespace until the copy execs: an
// agent polling /proc would otherwise read the daemon's flags, paths under
// the harness dir among them (docs/failures.md#nothing-inside-names-the-harness).
// os.Args point into the area, so they are copied out first; call it before
// anything keeps a string of them (a parsed flag does).
func BlankCommandLine() error {
	for i := range os.Args {
		os.Args[i] = strings.Clone(os.Args[i])
	}
	st, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		return err
	}
	if st.ArgEnd <= st.ArgStart {
		return errors.New("blank the command line: no argv area in /proc/self/stat")
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	blank := make([]byte, st.ArgEnd-st.ArgStart)
	copy(blank, "sandboxd")
	_, err = mem.WriteAt(blank, int64(st.ArgStart))
	return err
}
