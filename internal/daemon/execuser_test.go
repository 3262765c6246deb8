package daemon

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/pkg/idmap"
)

// `exec -u` resolves against the image's users as serve read them at start,
// as the phases' users are
// (docs/failures.md#exec-users-come-from-the-start-time-snapshot): a name
// the agent writes into /etc/passwd afterwards is refused, with the numeric
// form to use instead; a numeric uid[:gid] always works (a bare uid without
// an entry gets gid 0, as under Docker); a name the image had at start
// works, whatever the sandbox's /etc/passwd says now.
func TestExecUserResolvesAgainstTheStartTimeUsers(t *testing.T) {
	// The sandbox's /etc/passwd is its own: the substrate's is never touched.
	s := serveForTest(t, config.Config{Hide: []string{"/etc/passwd"}})
	r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", "echo 'inside-only:x:4242:4343::/:/bin/sh' >/etc/passwd"}, User: "0"}, "")
	require.Equal(t, 0, r.exit.Code, r.stderr)
	ids := []string{"/bin/sh", "-c", "echo $(id -u):$(id -g)"}

	r = s.exec(t, control.Request{Argv: ids, User: "inside-only"}, "")
	var f *control.Failure
	require.True(t, errors.As(r.err, &f), "a name made after start was looked up: %q %v", r.stdout, r.err)
	assert.Equal(t, 125, f.Code)
	assert.Contains(t, f.Message, `exec -u inside-only`)
	assert.Contains(t, f.Message, "give the numeric id instead")
	assert.Empty(t, r.stdout)

	for spec, want := range map[string]string{"4242:4343": "4242:4343\n", "4242": "4242:0\n"} {
		r = s.exec(t, control.Request{Argv: ids, User: spec}, "")
		require.NoError(t, r.err, spec)
		require.Equal(t, 0, r.exit.Code, r.stderr)
		assert.Equal(t, want, r.stdout, spec)
	}

	nobody, err := idmap.Lookup("/", "nobody")
	require.NoError(t, err, "the substrate's /etc/passwd has nobody")
	r = s.exec(t, control.Request{Argv: ids, User: "nobody"}, "")
	require.NoError(t, r.err)
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, fmt.Sprintf("%d:%d\n", nobody.UID, nobody.GID), r.stdout, "a name the image had at start")
}
