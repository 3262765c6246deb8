package layer

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	w := &lineWriter{mu: &sync.Mutex{}, w: &out, prefix: "[g] "}
	w.Write([]byte("a\nb"))
	w.Write([]byte("c\n"))
	assert.Equal(t, "[g] a\n[g] bc\n", out.String())
	assert.False(t, strings.Contains(out.String(), "[g] \n"))
}
