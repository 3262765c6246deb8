package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/control"
)

// `exec -u NAME` looks the user up in the sandbox's passwd as it is now, in
// the sandbox's own view (where the agent may have added the user, and where
// its links cannot lead into the daemon's files), not in the daemon's /.
func TestExecUserIsLookedUpInTheSandbox(t *testing.T) {
	// The sandbox's /etc/passwd is its own: the substrate's is never touched.
	s := serveForTest(t, Config{Hide: []string{"/etc/passwd"}})
	r := s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", "echo 'inside-only:x:4242:4343::/:/bin/sh' >/etc/passwd"}, User: "0"}, "")
	require.Equal(t, 0, r.exit.Code, r.stderr)

	r = s.exec(t, control.Request{Argv: []string{"/bin/sh", "-c", "echo $(id -u):$(id -g)"}, User: "inside-only"}, "")
	require.NoError(t, r.err)
	require.Equal(t, 0, r.exit.Code, r.stderr)
	assert.Equal(t, "4242:4343\n", r.stdout)
}
