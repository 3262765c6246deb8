package tail

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBufferKeepsTheEnd(t *testing.T) {
	b := New(8)
	b.Write([]byte("abc"))
	assert.Equal(t, "abc", b.String())
	b.Write([]byte("defghij"))
	assert.Equal(t, "cdefghij", b.String())
	n, err := b.Write([]byte(strings.Repeat("x", 20) + "end"))
	assert.NoError(t, err)
	assert.Equal(t, 23, n, "the whole write is taken")
	assert.Equal(t, "xxxxxend", b.String())
}

// Once full, the buffer takes writes without allocating: a stream relayed
// through it costs the garbage collector nothing per write.
func TestBufferAllocatesNothingOnceFull(t *testing.T) {
	b := New(16 << 10)
	chunk := []byte(strings.Repeat("y", 32<<10))
	b.Write(chunk)
	small := []byte("0123456789")
	allocs := testing.AllocsPerRun(100, func() {
		b.Write(chunk)
		b.Write(small)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, strings.Repeat("y", 16<<10-10)+"0123456789", b.String())
}
