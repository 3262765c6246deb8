package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
)

// Both doors answer from the one table of operations: what a harness key's
// command prints is the typed result the control socket sends, printed, and
// a failure says the same at both. exec is no operation of the table: a
// harness key cannot run it.
func TestBothDoorsServeTheOperationsTable(t *testing.T) {
	s := serveForTest(t, config.Config{})
	harness := func(command string) (stdout, stderr string, code int) {
		var out, errb bytes.Buffer
		code = s.d.harnessCommand(context.Background(), command, &out, &errb)
		return out.String(), errb.String(), code
	}

	out, _, code := harness("sandboxd status")
	require.Equal(t, 0, code)
	var st Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, s.d.holder.PID, st.Sandbox.PID)
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "status"}, &st))
	assert.Equal(t, s.d.holder.PID, st.Sandbox.PID, "the control socket sends the same type")

	out, _, code = harness("records")
	assert.Equal(t, 0, code)
	assert.Empty(t, out, "no session yet: no record line")
	var recs Records
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "records"}, &recs))
	assert.NotNil(t, recs)

	// SSH is off in this serve: keys fails, with the same reason at both doors.
	out, stderr, code := harness("keys")
	assert.Equal(t, 125, code)
	assert.Empty(t, out)
	assert.Equal(t, "sandboxd: keys: SSH is off (serve --listen ADDR turns it on)\n", stderr)
	err := s.client.Call(context.Background(), control.Request{Op: "keys"}, &Keys{})
	var f *control.Failure
	require.True(t, errors.As(err, &f), "%v", err)
	assert.Equal(t, 125, f.Code)
	assert.Equal(t, "SSH is off (serve --listen ADDR turns it on)", f.Message)

	for _, command := range []string{"exec -- id", "sandboxd exec id", "sh -c id", ""} {
		out, stderr, code = harness(command)
		assert.Equal(t, 2, code, command)
		assert.Empty(t, out, command)
		assert.Contains(t, stderr, "grade, keys, ready, records, status, stop", command)
	}
	err = s.client.Call(context.Background(), control.Request{Op: "nonsense"}, nil)
	require.True(t, errors.As(err, &f), "%v", err)
	assert.Contains(t, f.Message, "knows agent-done, cp, exec, grade, keys, ready, records, status, stop")
}
