package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/pkg/grade"
)

// A harness marks how the agent's run ended (a harness key's agent-done,
// or the control socket's); records shows the outcome on the agent's own
// session, named by its client address, whatever the filter.
func TestAgentDoneMarksTheAgentsSession(t *testing.T) {
	harness := t.TempDir()
	d := &Daemon{cfg: config.Config{HarnessDir: harness}, log: slog.New(slog.DiscardHandler)}
	var err error
	d.recs, err = records.Open(d.harnessPath("records"))
	require.NoError(t, err)
	now := time.Now()
	agentSession := records.Record{ID: records.NewID(now), Kind: "exec", Via: "ssh", Remote: "127.0.0.1:40001", Start: now, End: now}
	other := records.Record{ID: records.NewID(now), Kind: "exec", Via: "ssh", Remote: "127.0.0.1:40002", Start: now, End: now}
	require.NoError(t, d.recs.Write(&agentSession))
	require.NoError(t, d.recs.Write(&other))

	var stdout, stderr bytes.Buffer
	code := d.harnessCommand(context.Background(), "sandboxd agent-done --status timeout --exit-code -1 --duration 2.5 --remote 127.0.0.1:40001", &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())

	for _, f := range []control.Request{{}, {Session: agentSession.ID}} {
		recs, err := d.records(f)
		require.NoError(t, err)
		for _, r := range recs {
			switch r.ID {
			case agentSession.ID:
				require.NotNil(t, r.Agent, "the agent's session carries its outcome")
				assert.Equal(t, grade.Agent{Status: grade.AgentTimeout, ExitCode: -1, DurationSec: 2.5}, *r.Agent)
			case other.ID:
				assert.Nil(t, r.Agent, "no other session does")
			default:
				assert.Equal(t, "agent", r.Kind, "the mark is a record of its own")
				assert.Equal(t, "127.0.0.1:40001", r.Remote)
			}
		}
	}

	for _, bad := range []string{"agent-done", "agent-done --status finished", "agent-done --status error --exit-code x", "agent-done --bogus 1"} {
		stderr.Reset()
		assert.Equal(t, 2, d.harnessCommand(context.Background(), bad, &stdout, &stderr), bad)
		assert.Contains(t, stderr.String(), "agent-done", bad)
	}
}
