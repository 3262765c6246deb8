package cleanup

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCleanRunsNewestFirst(t *testing.T) {
	var order []int
	cu := Make(func() { order = append(order, 1) })
	cu.Add(func() { order = append(order, 2) })
	cu.Clean()
	assert.Equal(t, []int{2, 1}, order)
	cu.Clean()
	assert.Equal(t, []int{2, 1}, order, "a second Clean must not run the steps again")
}

func TestReleaseKeepsWhatWasBuilt(t *testing.T) {
	ran := false
	cu := Make(func() { ran = true })
	cu.Release()
	cu.Clean()
	assert.False(t, ran)
}
