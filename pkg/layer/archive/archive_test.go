package archive

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/layer/engine"
)

func TestRebuildHistory(t *testing.T) {
	hs := []engine.HistoryEntry{ // newest first, as docker history prints
		{CreatedBy: "/bin/sh -c #(nop)  CMD [\"bash\"]"},
		{CreatedBy: "/bin/sh -c true"}, // a RUN that changed nothing still made a layer
		{CreatedBy: "/bin/sh -c apt-get install x", Size: 5},
	}
	h := RebuildHistory(hs, 3-0)
	assert.Nil(t, h, "three layers cannot be matched by two candidate entries")
	h = RebuildHistory(hs, 2)
	require.Len(t, h, 3)
	assert.Equal(t, []bool{false, false, true}, []bool{h[0].EmptyLayer, h[1].EmptyLayer, h[2].EmptyLayer}, "oldest first")
	h = RebuildHistory(hs, 1)
	assert.Equal(t, []bool{false, true, true}, []bool{h[0].EmptyLayer, h[1].EmptyLayer, h[2].EmptyLayer})
}
