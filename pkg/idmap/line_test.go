package idmap

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLine: status and doctor state the map on one line, so that a user
// namespace of 65,536 ids (Kubernetes hostUsers: false) reads as such.
func TestLine(t *testing.T) {
	for _, tc := range []struct {
		m    Map
		want string
	}{
		{Map{{0, 0, 4294967295}}, "0 0 4294967295"},
		{Map{{0, 0, 65536}}, "0 0 65536"},
		{Map{{0, 1000, 1}, {1, 100000, 65536}}, "0 1000 1, 1 100000 65536"},
		{nil, ""},
	} {
		assert.Equal(t, tc.want, tc.m.Line())
	}
}
