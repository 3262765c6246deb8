package sftpd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestRepliesInjectBetweenPackets: an answer of ours never lands inside
// one of pkg/sftp's packets, however the server splits its writes.
func TestRepliesInjectBetweenPackets(t *testing.T) {
	var out bytes.Buffer
	r := newReplies(&out)
	version := finish(append(make([]byte, 4), fxpVersion, 0, 0, 0, 3))
	data := finish(append(packet(103, 7), bytes.Repeat([]byte{'x'}, 100)...))
	ours := limitsReply(9)

	for _, part := range [][]byte{version[:3], version[3:], data[:2], data[2:9]} {
		_, err := r.Write(part)
		require.NoError(t, err)
	}
	r.inject(ours) // mid-packet: waits
	_, err := r.Write(data[9:])
	require.NoError(t, err)

	got := out.Bytes()
	v := withOurExtensions(version)
	require.True(t, bytes.HasPrefix(got, v), "VERSION carries limits@openssh.com and fsync@openssh.com")
	got = got[len(v):]
	assert.Equal(t, data, got[:len(data)], "the data packet whole")
	assert.Equal(t, ours, got[len(data):], "then ours")
}

// TestRequestsAnswerLimitsAndMakeDirectoriesWithTheirMode.
func TestRequestsAnswerLimitsAndMakeDirectoriesWithTheirMode(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	old := unix.Umask(0o022)
	defer unix.Umask(old)

	limits := finish(appendString(packet(fxpExtended, 1), limitsExt))
	mkdir := func(id uint32, name string, mode uint32) []byte {
		b := appendString(packet(fxpMkdir, id), name)
		b = binary.BigEndian.AppendUint32(b, attrPermissions)
		return finish(binary.BigEndian.AppendUint32(b, mode))
	}
	write := finish(append(appendString(packet(6, 3), "h"), make([]byte, 12)...))
	var client bytes.Buffer
	for _, p := range [][]byte{limits, mkdir(2, "private", 0o700), write, mkdir(4, "private", 0o755)} {
		client.Write(p)
	}
	var out bytes.Buffer
	q := &requests{r: bufio.NewReader(&client), out: &replies{w: &out}}
	passed, err := io.ReadAll(q)
	require.NoError(t, err)

	st, err := os.Stat(filepath.Join(dir, "private"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "made with the mode asked for")
	want := append(append(setstatNothing(2, "private"), write...), mkdir(4, "private", 0o755)...)
	assert.Equal(t, want, passed, "made: a SETSTAT of nothing; not made (it exists): passed for pkg/sftp to report")
	assert.Equal(t, limitsReply(1), out.Bytes(), "limits answered here")
}
