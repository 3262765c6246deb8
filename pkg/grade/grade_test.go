package grade_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/grade"
)

func TestGradedRewardTxtAndLogsCopy(t *testing.T) {
	testsLeftAsFound(t)
	w := newWorld(t)
	tests := w.tests(t, "#!/bin/sh\necho hello from the verifier\ncat /tests/data.txt\necho 0.75 > /logs/verifier/reward.txt\nexit 3\n",
		map[string]string{"data.txt": "some data\n"})
	v := w.grade(t, w.config(t, tests))
	assert.Equal(t, grade.StatusGraded, v.Status, v.Message)
	assert.Equal(t, map[string]float64{"reward": 0.75}, v.Reward)
	assert.Equal(t, 3, v.ExitCode, "test.sh's own exit code is reported")
	assert.Equal(t, 0, v.Status.ExitCode())
	assert.Contains(t, v.StdoutTail, "hello from the verifier\nsome data\n")
	b, err := os.ReadFile(filepath.Join(w.logs, "reward.txt"))
	require.NoError(t, err)
	assert.Equal(t, "0.75\n", string(b))
	b, err = os.ReadFile(filepath.Join(w.logs, "test-stdout.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "hello from the verifier")
}
