package execclient

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/control"
)

// The request this package writes by hand is the control.Request the
// daemon reads with encoding/json, field for field.
func TestRequestJSONIsControlsRequest(t *testing.T) {
	for _, r := range []Request{
		{Argv: []string{"true"}},
		{Argv: []string{"sh", "-c", `echo "$X" <&>` + "\n\xff"}, User: "1000:1000", Dir: "/tmp/a b", Env: []string{"X=1", "Y=\u2028"},
			TTY: true, Stdin: true, Term: "xterm-256color", Cols: 80, Rows: 24, Timeout: "1m30s"},
		{Argv: []string{""}, Env: []string{}},
	} {
		var got control.Request
		require.NoError(t, json.Unmarshal(r.JSON(), &got), "%s", r.JSON())
		want := control.Request{Op: "exec", Argv: r.Argv, User: r.User, Dir: r.Dir, Env: r.Env, TTY: r.TTY, Stdin: r.Stdin,
			Term: r.Term, Cols: r.Cols, Rows: r.Rows, Timeout: r.Timeout}
		if len(want.Env) == 0 {
			want.Env = nil // omitted, as encoding/json omits an empty list
		}
		theirs, err := json.Marshal(want)
		require.NoError(t, err)
		var wantBack control.Request
		require.NoError(t, json.Unmarshal(theirs, &wantBack))
		assert.Equal(t, wantBack, got)
	}
}

// The quick path stands aside for a child role, as main's childproc.Maybe
// would run it first.
func TestQuickExecKnowsTheChildRoleMarker(t *testing.T) {
	assert.Equal(t, childproc.Env, childRoleEnv)
}
