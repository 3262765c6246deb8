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
	} {
		t.Run(string(tc.v.Status), func(t *testing.T) {
			assert.Equal(t, tc.code, tc.v.Status.ExitCode())
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
