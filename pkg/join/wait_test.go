package join_test

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// Commands that are waited for park their goroutines on a pidfd: forty
// running commands do not take forty OS threads blocked in waitid(2), which
// made a thread hand-off per start and per exit under load
// (docs/failures.md#a-waiting-command-holds-no-thread). Their statuses are
// still each their own.
func TestWaitingCommandsHoldNoThreads(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	const n = 40
	release := t.TempDir() + "/go"
	var procs []*join.Process
	for i := range n {
		st, err := sb.Target.Command(join.Spec{User: idmap.User{}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/",
			Argv: []string{"sh", "-c", "while [ ! -e " + release + " ]; do sleep 0.05; done; exit " + strconv.Itoa(i)}})
		require.NoError(t, err)
		p, err := st.Start()
		require.NoError(t, err)
		procs = append(procs, p)
	}
	before := procfs.Threads()
	codes := make([]int, n)
	var waiting, done sync.WaitGroup
	waiting.Add(n)
	done.Add(n)
	for i, p := range procs {
		go func() {
			defer done.Done()
			waiting.Done()
			code, _, ok := join.ExitStatus(p.Cmd.Wait())
			if !ok {
				code = -1
			}
			codes[i] = code
		}()
	}
	waiting.Wait()
	// Give every waiter the time to reach its wait; a thread blocked in
	// waitid would show in the count from then on.
	time.Sleep(300 * time.Millisecond)
	during := procfs.Threads()
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	done.Wait()
	assert.Less(t, during-before, n/2, "threads before the waits %d, during %d", before, during)
	for i, code := range codes {
		assert.Equal(t, i, code, "command %d", i)
	}
}
