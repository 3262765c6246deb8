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
