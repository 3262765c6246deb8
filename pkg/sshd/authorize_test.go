package sshd_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// TestAuthorizeAgentKeysWhileServing: keys added to a serving server let
// their holders in while other connections authenticate at the same time
// (run with -race), and a harness key is never made an agent key
// (docs/failures.md#a-warm-sandbox-takes-its-trials-key-after-the-claim).
func TestAuthorizeAgentKeysWhileServing(t *testing.T) {
	ts := startServer(t, options{})
	dir := t.TempDir()
	var signers []ssh.Signer
	var lines []byte
	for _, name := range []string{"late1", "late2", "late3", "late4"} {
		_, s := newKey(t, dir, name)
		signers = append(signers, s)
		lines = append(lines, ssh.MarshalAuthorizedKey(s.PublicKey())...)
	}
	dial := func(s ssh.Signer) error {
		c, err := ssh.Dial("tcp", ts.addr, &ssh.ClientConfig{User: "agent", Auth: []ssh.AuthMethod{ssh.PublicKeys(s)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
		if err == nil {
			c.Close()
		}
		return err
	}
	require.Error(t, dial(signers[0]), "not yet authorized")

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				assert.NoError(t, dial(ts.agentSign), "the key serve started with stays")
			}
		}()
	}
	added, had, err := ts.srv.AuthorizeAgentKeys(lines)
	wg.Wait()
	require.NoError(t, err)
	assert.Len(t, added, 4)
	assert.Empty(t, had)
	for _, s := range signers {
		assert.NoError(t, dial(s))
	}

	added, had, err = ts.srv.AuthorizeAgentKeys(ssh.MarshalAuthorizedKey(signers[0].PublicKey()))
	require.NoError(t, err)
	assert.Empty(t, added)
	assert.Len(t, had, 1, "a key accepted already is reported, not added twice")

	_, _, err = ts.srv.AuthorizeAgentKeys(ssh.MarshalAuthorizedKey(ts.harnessSig.PublicKey()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "harness key")
}
