package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

// recordLines runs `records` with req's filters at the harness door and
// at the control socket, which must agree, and decodes the JSON Lines.
func recordLines(t *testing.T, s *served, args string, req control.Request) []records.Record {
	t.Helper()
	var out, errb bytes.Buffer
	code := s.d.harnessCommand(context.Background(), "records "+args, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var recs []records.Record
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var r records.Record
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		recs = append(recs, r)
	}
	req.Op = "records"
	var viaSocket Records
	require.NoError(t, s.client.Call(context.Background(), req, &viaSocket))
	assert.Len(t, viaSocket, len(recs), "both doors list the same records")
	return recs
}

// A control-socket exec is on the record as an SSH exec is, with its
// output (the end inline, the whole in a file) and what it used.
func TestControlExecIsRecorded(t *testing.T) {
	requireTool(t, "python3")
	s := serveForTest(t, config.Config{AgentUser: "4321:4321"})
	before := time.Now()
	script := `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; python3 -c 'b = bytearray(64 << 20); print("allocated")'; echo to-stderr >&2; exit 3`
	r := s.sh(t, script)
	require.NoError(t, r.err)
	require.Equal(t, 3, r.exit.Code)
	s.sh(t, "true")

	recs := recordLines(t, s, "", control.Request{})
	require.Len(t, recs, 2)
	rec := recs[0]
	assert.Equal(t, "exec", rec.Kind)
	assert.Equal(t, "control", rec.Via)
	assert.Equal(t, []string{"/bin/sh", "-c", script}, rec.Argv)
	assert.Equal(t, 3, rec.Exit)
	assert.Equal(t, uint32(4321), rec.UID)
	assert.False(t, rec.End.Before(rec.Start))
	assert.Equal(t, int64(len("allocated\nto-stderr\n")), rec.BytesOut)
	require.NotNil(t, rec.Usage)
	assert.Greater(t, rec.Usage.UserCPUSec+rec.Usage.SystemCPUSec, 0.0)
	assert.GreaterOrEqual(t, rec.Usage.MaxRSSBytes, int64(64<<20), "python's 64 MiB is in the max RSS")
	require.NotNil(t, rec.Output)
	assert.Equal(t, "allocated\n", rec.Output.Stdout)
	assert.Equal(t, "to-stderr\n", rec.Output.Stderr)
	whole, err := os.ReadFile(filepath.Join(s.harness, "records", rec.Output.StdoutFile))
	require.NoError(t, err)
	assert.Equal(t, "allocated\n", string(whole))

	// The filters: by session id, and by end time.
	only := recordLines(t, s, "--session "+rec.ID, control.Request{Session: rec.ID})
	require.Len(t, only, 1)
	assert.Equal(t, rec.ID, only[0].ID)
	assert.Len(t, recordLines(t, s, "--since "+before.UTC().Format(time.RFC3339Nano), control.Request{Since: before.UTC().Format(time.RFC3339Nano)}), 2)
	assert.Empty(t, recordLines(t, s, "--since "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339), control.Request{Since: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}))
	assert.Len(t, recordLines(t, s, "--since 1h", control.Request{Since: "1h"}), 2)

	// A bad --since is a usage error.
	var f *control.Failure
	require.ErrorAs(t, s.client.Call(context.Background(), control.Request{Op: "records", Since: "yesterday"}, &Records{}), &f)
	assert.Equal(t, 2, f.Code)
	assert.Contains(t, f.Message, "RFC 3339")
}

// A control exec with a terminal is recorded as an SSH pty session is: its
// output is an asciicast, not an output record.
func TestControlExecWithTerminalIsCast(t *testing.T) {
	s := serveForTest(t, config.Config{})
	r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", "echo on-the-terminal"}, TTY: true, Term: "xterm", Cols: 100, Rows: 30}, "")
	require.NoError(t, r.err)
	recs := recordLines(t, s, "", control.Request{})
	require.Len(t, recs, 1)
	assert.True(t, recs[0].PTY)
	assert.Nil(t, recs[0].Output)
	require.NotEmpty(t, recs[0].Cast)
	cast, err := os.ReadFile(filepath.Join(s.harness, "records", recs[0].Cast))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(cast)), "\n")
	assert.Contains(t, lines[0], `"width":100`)
	assert.Contains(t, string(cast), "on-the-terminal")
}

// A copy is on the record too.
func TestCopyIsRecorded(t *testing.T) {
	s := serveForTest(t, config.Config{})
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, tarcopy.Run(ctx, s.client, tarcopy.Copy{Src: "sandbox:/etc/hostname", Dst: out}))
	recs := recordLines(t, s, "", control.Request{})
	require.Len(t, recs, 1)
	assert.Equal(t, "cp", recs[0].Kind)
	assert.Equal(t, "cp out /etc/hostname", recs[0].Command)
	assert.NotNil(t, recs[0].Usage)
	assert.Greater(t, recs[0].BytesOut, int64(512), "the archive's bytes")
}
