package entrypoint

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// However much the entrypoint writes, its log stays bounded: the file moves
// to entrypoint.log.1 at its limit, and the two hold the latest output.
func TestEntrypointLogIsBoundedAndKeepsTheLatest(t *testing.T) {
	dir := t.TempDir()
	l, err := openLog(dir)
	require.NoError(t, err)
	l.max = 1 << 20
	var in bytes.Buffer
	for i := 0; in.Len() < 5<<20; i++ {
		in.WriteString(strings.Repeat("x", i%100) + "\n")
	}
	want := in.Bytes()
	l.copy(bytes.NewReader(want), slog.New(slog.DiscardHandler))

	cur, err := os.ReadFile(filepath.Join(dir, "entrypoint.log"))
	require.NoError(t, err)
	old, err := os.ReadFile(filepath.Join(dir, "entrypoint.log.1"))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(cur), 1<<20)
	assert.LessOrEqual(t, len(old), 1<<20)
	assert.Greater(t, len(old), 1<<19)
	assert.True(t, bytes.HasSuffix(want, append(old, cur...)), "the two files hold the latest output, in order")
	_, err = os.Stat(filepath.Join(dir, "entrypoint.log.2"))
	assert.True(t, os.IsNotExist(err), "one old file is kept, no more")
}
