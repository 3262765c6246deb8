package spare

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/procfs"
)

// After Begin(n) and its wait the process has n threads more than it needed before,
// parked for later: the runtime does not end idle threads.
func TestThreadsStayMadeForLater(t *testing.T) {
	before := procfs.Threads()
	require.NotZero(t, before)
	Begin(before + 32)()
	assert.GreaterOrEqual(t, procfs.Threads(), before+32)
}
