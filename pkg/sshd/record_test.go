package sshd_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/sshd"
)

// An SSH exec's record carries what it used, from wait4's rusage.
func TestRecordCarriesResourceUsage(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	_, _, code, _ := output(t, c, `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; python3 -c 'b = bytearray(64 << 20)'`)
	require.Equal(t, 0, code)
	var recs []sshd.Record
	require.Eventually(t, func() bool {
		var err error
		recs, err = sshd.ReadRecords(ts.recordsDir)
		return err == nil && len(recs) == 1
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, "ssh", recs[0].Via)
	require.NotNil(t, recs[0].Usage)
	assert.Greater(t, recs[0].Usage.UserCPUSec+recs[0].Usage.SystemCPUSec, 0.0)
	assert.GreaterOrEqual(t, recs[0].Usage.MaxRSSBytes, int64(64<<20))
}

// A non-pty exec's output is kept in its record; a pty session's is its
// cast instead.
func TestRecordKeepsExecOutput(t *testing.T) {
	ts := startServer(t, options{})
	c := ts.client(t, ts.agentSign)
	_, _, code, _ := output(t, c, "echo out; echo err >&2")
	require.Equal(t, 0, code)
	var recs []sshd.Record
	require.Eventually(t, func() bool {
		var err error
		recs, err = sshd.ReadRecords(ts.recordsDir)
		return err == nil && len(recs) == 1
	}, 5*time.Second, 20*time.Millisecond)
	require.NotNil(t, recs[0].Output)
	assert.Equal(t, "out\n", recs[0].Output.Stdout)
	assert.Equal(t, "err\n", recs[0].Output.Stderr)
	b, err := os.ReadFile(filepath.Join(ts.recordsDir, recs[0].Output.StdoutFile))
	require.NoError(t, err)
	assert.Equal(t, "out\n", string(b))
}
