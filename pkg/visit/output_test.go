package visit

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadTailKeepsTheEndAsValidUTF8(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteString(strings.Repeat("é", TailSize) + "\nlast line\n")
	require.NoError(t, err)
	got := Tail(f)
	assert.LessOrEqual(t, len(got), TailSize+2)
	assert.True(t, strings.HasSuffix(got, "last line\n"))
	assert.NotContains(t, got, "\uFFFD\uFFFD")
}
