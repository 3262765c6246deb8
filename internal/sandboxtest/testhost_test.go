package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A test host's network namespace is mounted nowhere: a mount made or
// removed on the host while a --host sandbox starts makes that sandbox's
// bwrap fail (docs/failures.md#test-hosts-make-no-mount). It is still a host
// of its own, reachable from the substrate at its address.
func TestTestHostMakesNoMount(t *testing.T) {
	h := NewTestHost(t)
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(h.netns(), &st))
	own, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	ns := fmt.Sprintf("net:[%d]", st.Ino)
	require.NotEqual(t, own, ns, "the host has a network namespace of its own")

	mounts, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), ns, "the host's namespace is mounted")

	ln := h.Listen(t, 0)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("from the test host"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	assert.True(t, strings.HasPrefix(string(buf[:n]), "from the test host"))
}
