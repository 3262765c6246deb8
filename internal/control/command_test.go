package control

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/grade"
)

// A harness key's command line, as ssh hands it over, becomes the same
// request the CLI sends over the control socket.
func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		words  []string
		want   Request
		asJSON bool
		err    string
	}{
		{words: []string{"status", "--ready"}, want: Request{Op: "ready"}},
		{words: []string{"grade", "--timeout", "10m", "--json"}, want: Request{Op: "grade", GradeTimeout: "10m"}, asJSON: true},
		{words: []string{"grade", "--timeout", "soon"}, err: `grade: bad --timeout "soon"`},
		{words: []string{"records", "--since", "10m", "--session", "abc"}, want: Request{Op: "records", Since: "10m", Session: "abc"}},
		{words: []string{"agent-done", "--status", "timeout", "--exit-code", "-1", "--duration", "2.5", "--remote", "10.0.0.1:5000"},
			want: Request{Op: "agent-done", Remote: "10.0.0.1:5000", Agent: &grade.Agent{Status: grade.AgentTimeout, ExitCode: -1, DurationSec: 2.5}}},
		{words: []string{"agent-done", "--duration", "-1"}, err: `agent-done: bad --duration "-1": seconds`},
		{words: []string{"agent-done", "--status"}, err: "agent-done: --status needs a value"},
		{words: []string{"keys", "--authorize", "ssh-ed25519", "AAAA", "me@host"}, want: Request{Op: "keys", Authorize: "ssh-ed25519 AAAA me@host"}},
	} {
		req, asJSON, err := ParseCommand(tc.words)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, "%v", tc.words)
			continue
		}
		require.NoError(t, err, "%v", tc.words)
		assert.Equal(t, tc.want, req, "%v", tc.words)
		assert.Equal(t, tc.asJSON, asJSON, "%v", tc.words)
	}
}
