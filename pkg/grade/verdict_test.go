package grade

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every status has its exit code, sandboxd's own failure included, and
// Print writes each verdict as one JSON document with the code its status
// has.
func TestEveryStatusHasItsExitCode(t *testing.T) {
	for _, tc := range []struct {
		v    Verdict
		code int
		line string
	}{
		{Verdict{Status: StatusGraded, Reward: map[string]float64{"reward": 1}}, 0, "sandboxd: graded: reward map[reward:1]\n"},
		{Verdict{Status: StatusNoReward, ExitCode: 0, Message: "none"}, 3, "sandboxd: no_reward: none (this is not a score)\n"},
		{Verdict{Status: StatusTimeout, ExitCode: -1, Message: "slow"}, 4, "sandboxd: verifier_timeout: slow (this is not a score)\n"},
		{Verdict{Status: StatusError, ExitCode: -1, Message: "bad"}, 5, "sandboxd: verifier_error: bad (this is not a score)\n"},
		{Internal("no daemon"), 125, "sandboxd: error: no daemon (this is not a score)\n"},
		{Verdict{Status: StatusUnhealthy, ExitCode: -1, Message: "never passed"}, 7, "sandboxd: unhealthy: never passed (this is not a score)\n"},
	} {
		t.Run(string(tc.v.Status), func(t *testing.T) {
			assert.Equal(t, tc.code, tc.v.Status.ExitCode())
			assert.Equal(t, tc.code, tc.v.Exit())
			var out, errb bytes.Buffer
			assert.Equal(t, tc.code, tc.v.Print(&out, &errb))
			assert.Equal(t, tc.line, errb.String())
			var doc map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &doc))
			assert.Equal(t, string(tc.v.Status), doc["status"])
			for _, key := range []string{"reward", "exit_code", "duration_sec", "stdout_tail"} {
				assert.Contains(t, doc, key)
			}
			if tc.v.Status != StatusGraded {
				assert.Nil(t, doc["reward"], "only graded carries a reward")
			}
		})
	}
}

// A graded run whose agent timed out keeps its reward but has an exit code
// of its own; an agent that ended in error does not change the code.
func TestAgentOutcomeExitCode(t *testing.T) {
	for _, tc := range []struct {
		agent *Agent
		code  int
		line  string
	}{
		{nil, 0, "sandboxd: graded: reward map[reward:1]\n"},
		{&Agent{Status: AgentCompleted, DurationSec: 1}, 0, "sandboxd: graded: reward map[reward:1]\n"},
		{&Agent{Status: AgentError, ExitCode: 3, DurationSec: 1}, 0, "sandboxd: graded: reward map[reward:1]\n"},
		{&Agent{Status: AgentTimeout, ExitCode: -1, DurationSec: 2}, ExitAgentTimeout, "sandboxd: graded: reward map[reward:1] (the agent timed out after 2.0s)\n"},
	} {
		v := Verdict{Status: StatusGraded, Reward: map[string]float64{"reward": 1}, Agent: tc.agent}
		var out, errb bytes.Buffer
		assert.Equal(t, tc.code, v.Print(&out, &errb))
		assert.Equal(t, tc.line, errb.String())
		var doc map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &doc))
		if tc.agent == nil {
			assert.NotContains(t, doc, "agent", "grade's verdict has no agent")
			continue
		}
		assert.Equal(t, string(tc.agent.Status), doc["agent"].(map[string]any)["status"])
		assert.Contains(t, doc["agent"], "exit_code")
		assert.Contains(t, doc["agent"], "duration_sec")
	}
}
