package bwrap_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

// The version read from bwrap's binary is the one bwrap prints, for the
// bwrap on this machine (0.8 on bookworm, 0.4.1 in the bullseye run of
// scripts/container-tests.sh).
func TestTheVersionInTheBinaryIsTheOneItPrints(t *testing.T) {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		sandboxtest.Need(t, "bwrap (apt-get install bubblewrap)")
	}
	out, err := exec.Command(path, "--version").Output()
	require.NoError(t, err)
	printed, err := bwrap.ParseVersion(string(out))
	require.NoError(t, err)
	read, ok := bwrap.VersionInBinary(path)
	require.True(t, ok, "no single version string in %s", path)
	assert.Equal(t, printed, read)
}

// Where the binary does not say its version once and plainly, Probe runs
// it: a script, two versions, a version with a suffix.
func TestProbeRunsWhatTheBinaryDoesNotSay(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o755))
		return p
	}
	script := write("script", "#!/bin/sh\n# \x00bubblewrap 0.5.0\x00\necho bubblewrap 0.9.1\n")
	_, ok := bwrap.VersionInBinary(script)
	assert.False(t, ok, "a script is not read")
	_, v, err := bwrap.Probe(context.Background(), script)
	require.NoError(t, err)
	assert.Equal(t, bwrap.Version{0, 9, 1}, v, "what the script prints")

	elf := "\x7fELF\x02\x01\x01"
	for name, body := range map[string]string{
		"two":    elf + "\x00bubblewrap 0.8.0\x00..\x00bubblewrap 0.9.0\x00",
		"suffix": elf + "\x00bubblewrap 0.8.0-rc1\x00",
		"none":   elf + "\x00bubblewrap\x00",
	} {
		_, ok := bwrap.VersionInBinary(write(name, body))
		assert.False(t, ok, name)
	}
	v, ok = bwrap.VersionInBinary(write("twice", elf+"\x00bubblewrap 0.7.2\x00 \x00bubblewrap 0.7.2\x00"))
	assert.True(t, ok)
	assert.Equal(t, bwrap.Version{0, 7, 2}, v, "the same version twice is one version")
	_, ok = bwrap.VersionInBinary(dir)
	assert.False(t, ok, "a directory")
}
