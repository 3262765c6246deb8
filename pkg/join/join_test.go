package join_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

func TestJoinRunsAsUserWithExactEnv(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Run(t, "0", []string{"PATH=/usr/bin:/bin", "FOO=bar", "SANDBOXD_LOOKS_INTERNAL=kept"}, "env")
	require.Equal(t, 0, r.Code, r.Stderr)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	assert.ElementsMatch(t, []string{"PATH=/usr/bin:/bin", "FOO=bar", "SANDBOXD_LOOKS_INTERNAL=kept"}, lines)

	r = sb.Sh(t, "1000:1000", "id -u; id -g; cat /proc/self/status | grep -E '^Cap(Prm|Eff|Bnd)'")
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "1000\n1000\n")
	assert.Contains(t, r.Stdout, "CapPrm:\t0000000000000000")
}

func TestExitCodesAndSetupErrors(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	assert.Equal(t, 7, sb.Sh(t, "0", "exit 7").Code)
	r := sb.Run(t, "0", nil, "no-such-program")
	assert.Equal(t, 127, r.Code)
	assert.Contains(t, r.Stderr, "not found")
}
