package faults

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// harnessKey is the key every serve of this run accepts as a harness key.
var harnessKey = func() ssh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		panic(err)
	}
	return s
}()

// harnessKeysFile writes the harness key as an authorized_keys file.
func harnessKeysFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "harness_keys")
	require.NoError(t, os.WriteFile(p, ssh.MarshalAuthorizedKey(harnessKey.PublicKey()), 0o600))
	return p
}

func dialSSH(t *testing.T, s *server, signer ssh.Signer) *ssh.Client {
	t.Helper()
	require.NotNil(t, s.status.SSH, "serve has its SSH door on")
	return sandboxtest.DialSSH(t, s.status.SSH.Listen, signer)
}

// sshClient logs in with the agent key serve generated (`sandboxd keys`).
func sshClient(t *testing.T, s *server) *ssh.Client {
	t.Helper()
	var keys map[string]string
	require.NoError(t, s.client.Call(context.Background(), control.Request{Op: "keys"}, &keys))
	signer, err := ssh.ParsePrivateKey([]byte(keys["private_key"]))
	require.NoError(t, err)
	return dialSSH(t, s, signer)
}

// harnessSSH logs in with the harness key: control commands only.
func harnessSSH(t *testing.T, s *server) *ssh.Client {
	t.Helper()
	return dialSSH(t, s, harnessKey)
}
