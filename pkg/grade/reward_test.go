package grade

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestParseRewardTxt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{in: "1", want: 1},
		{in: "0.5\n", want: 0.5},
		{in: "  -2e-3 \r\n", want: -0.002},
		{in: "0", want: 0},
		{in: "", err: "empty"},
		{in: " \n\t", err: "empty"},
		{in: "nan", err: "not a finite number"},
		{in: "NaN", err: "not a finite number"},
		{in: "inf", err: "not a finite number"},
		{in: "-Infinity", err: "not a finite number"},
		{in: "1e999", err: "not a finite number"},
		{in: "1 2", err: "not a number"},
		{in: "PASSED", err: "not a number"},
		{in: "1,0", err: "not a number"},
	} {
		r, err := parseRewardTxt([]byte(tc.in))
		if tc.err != "" {
			require.Error(t, err, "%q", tc.in)
			assert.Contains(t, err.Error(), tc.err, "%q", tc.in)
			assert.Equal(t, tc.err == "empty", errors.Is(err, errEmpty), "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, map[string]float64{"reward": tc.want}, r)
	}
}

func TestParseRewardJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]float64
		err  string
	}{
		{in: `{"reward": 1}`, want: map[string]float64{"reward": 1}},
		{in: `{"reward": 0.5, "accuracy": 0.25, "n": -3}` + "\n", want: map[string]float64{"reward": 0.5, "accuracy": 0.25, "n": -3}},
		{in: "", err: "empty"},
		{in: "  \n", err: "empty"},
		{in: "{}", err: "no metrics"},
		{in: "null", err: "null"},
		{in: "[1]", err: "not an object"},
		{in: "1", err: "not an object"},
		{in: `{"reward": NaN}`, err: "NaN and Infinity"},
		{in: `{"reward": Infinity}`, err: "NaN and Infinity"},
		{in: `{"reward": 1e400}`, err: "not a finite number"},
		{in: `{"reward": "1"}`, err: "not a number"},
		{in: `{"reward": true}`, err: "not a number"},
		{in: `{"reward": null}`, err: "not a number"},
		{in: `{"reward": {"x": 1}}`, err: "not a number"},
		{in: `{"reward": [1]}`, err: "not a number"},
		{in: `{"reward": 1} {"reward": 2}`, err: "more follows"},
		{in: `{"reward": 1`, err: "invalid JSON"},
	} {
		r, err := parseRewardJSON([]byte(tc.in))
		if tc.err != "" {
			require.Error(t, err, "%q", tc.in)
			assert.Contains(t, err.Error(), tc.err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, r)
	}
}

func TestReadRewardPrefersJSONAndRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	open := func() int {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	r, st, msg := readReward(open())
	assert.Equal(t, StatusNoReward, st)
	assert.Nil(t, r)
	assert.Contains(t, msg, "neither")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "reward.txt"), []byte("0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reward.json"), []byte(`{"reward": 1, "style": 0.5}`), 0o644))
	r, st, _ = readReward(open())
	assert.Equal(t, StatusGraded, st)
	assert.Equal(t, map[string]float64{"reward": 1, "style": 0.5}, r)

	require.NoError(t, os.Remove(filepath.Join(dir, "reward.json")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat("1", maxRewardSize+1)), 0o644))
	require.NoError(t, os.Rename(filepath.Join(dir, "big"), filepath.Join(dir, "reward.json")))
	_, st, msg = readReward(open())
	assert.Equal(t, StatusError, st)
	assert.Contains(t, msg, "reward.json")
	assert.Contains(t, msg, "bytes")

	require.NoError(t, os.Remove(filepath.Join(dir, "reward.json")))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "reward.json"), 0o644))
	_, st, msg = readReward(open())
	assert.Equal(t, StatusError, st, "a FIFO must neither block nor count")
	assert.Contains(t, msg, "not a regular file")
}

func TestStatusExitCodes(t *testing.T) {
	assert.Equal(t, 0, StatusGraded.ExitCode())
	assert.Equal(t, 3, StatusNoReward.ExitCode())
	assert.Equal(t, 4, StatusTimeout.ExitCode())
	assert.Equal(t, 5, StatusError.ExitCode())
	assert.Equal(t, 5, Status("something new").ExitCode(), "an unknown status is never a success")
}

// The verdict JSON is what `sandboxd grade --json` prints; its field names
// are a contract with harnesses.
func TestVerdictJSON(t *testing.T) {
	b, err := json.Marshal(Verdict{Status: StatusNoReward, ExitCode: 0, DurationSec: 1.5, StdoutTail: "x"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":"no_reward","reward":null,"exit_code":0,"duration_sec":1.5,"stdout_tail":"x"}`, string(b))
	b, err = json.Marshal(Verdict{Status: StatusGraded, Reward: map[string]float64{"reward": 1}, Message: "m"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":"graded","reward":{"reward":1},"exit_code":0,"duration_sec":0,"stdout_tail":"","message":"m"}`, string(b))
}
