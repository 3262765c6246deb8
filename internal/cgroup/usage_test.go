package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUsageReadsV1AndV2Counters(t *testing.T) {
	files := func(t *testing.T, kv map[string]string) string {
		dir := t.TempDir()
		for k, v := range kv {
			require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644))
		}
		return dir
	}
	v2 := files(t, map[string]string{"memory.current": "1048576\n", "memory.peak": "2097152\n", "pids.current": "3\n",
		"cpu.stat": "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n"})
	u, err := (&Group{dirs: []string{v2}}).Usage()
	require.NoError(t, err)
	assert.Equal(t, Usage{MemoryBytes: 1 << 20, MemoryPeakBytes: 2 << 20, CPUSeconds: 1.5, Processes: 3}, u)

	v1 := []string{
		files(t, map[string]string{"memory.usage_in_bytes": "4096", "memory.max_usage_in_bytes": "8192"}),
		files(t, map[string]string{"pids.current": "2"}),
		files(t, map[string]string{"cpuacct.usage": "250000000"}),
	}
	u, err = (&Group{dirs: v1}).Usage()
	require.NoError(t, err)
	assert.Equal(t, Usage{MemoryBytes: 4096, MemoryPeakBytes: 8192, CPUSeconds: 0.25, Processes: 2}, u)

	// v1's cpu hierarchy alone counts no CPU time: not a usage source.
	_, err = (&Group{dirs: v1[:2]}).Usage()
	assert.ErrorContains(t, err, "not all three")
}
