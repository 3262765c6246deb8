package sftpd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The legacy protocol, driven byte by byte as a client sends it: the
// end-to-end tests with real clients are in pkg/sshd (files_test.go).

// sink runs the sink with the client's bytes and returns what it answered.
func sink(t *testing.T, target string, client string, flags ...string) (answers string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	args := append(append(flags, "-t", "--"), target)
	code = serveSCP(args, strings.NewReader(client), &out, &errb)
	return out.String(), code
}

// TestSinkRefusesNamesOutsideTheTarget: a name in a C or D line is one
// entry of the target directory; "..", "." and anything with a slash end
// the transfer before anything is written, as OpenSSH's scp does since
// CVE-2018-20685.
func TestSinkRefusesNamesOutsideTheTarget(t *testing.T) {
	for _, name := range []string{"..", ".", "../escape", "a/b", "/etc/passwd", ""} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			target := filepath.Join(root, "target")
			require.NoError(t, os.Mkdir(target, 0o755))
			answers, code := sink(t, target, "C0644 4 "+name+"\nevil\x00", "-r")
			assert.Equal(t, 1, code)
			assert.True(t, strings.HasPrefix(answers, "\x00\x02scp: error: unexpected filename"), "%q", answers)
			entries, err := os.ReadDir(root)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "only the target is in its parent")
			inside, err := os.ReadDir(target)
			require.NoError(t, err)
			assert.Empty(t, inside)
		})
	}
}

// TestSinkAndSource moves a small tree in with -r -p and out again, and
// checks every answer byte of the sink and every line of the source.
func TestSinkAndSource(t *testing.T) {
	dir := t.TempDir()
	client := "" +
		"T1000000000 0 1000000000 0\n" + "D0750 0 tree\n" +
		"C0755 3 run\n" + "ab\n\x00" +
		"D0700 0 empty\n" + "E\n" +
		"T981173106 0 981173106 0\n" + "C0600 0 zero\n" + "\x00" +
		"E\n"
	answers, code := sink(t, dir, client, "-r", "-p")
	require.Equal(t, 0, code, "%q", answers)
	// One 0 at the start, and one for each T, D, C and E line and each
	// file's data: 1 + 2 T + 2 D + 2 C + 2 data + 2 E.
	assert.Equal(t, strings.Repeat("\x00", 11), answers)

	tree := filepath.Join(dir, "tree")
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{"", 0o750 | os.ModeDir}, {"run", 0o755}, {"empty", 0o700 | os.ModeDir}, {"zero", 0o600}} {
		st, err := os.Stat(filepath.Join(tree, c.path))
		require.NoError(t, err, c.path)
		assert.Equal(t, c.mode, st.Mode(), c.path)
	}
	st, err := os.Stat(tree)
	require.NoError(t, err)
	assert.Equal(t, int64(1000000000), st.ModTime().Unix(), "the directory's time, set after it was filled")
	st, err = os.Stat(filepath.Join(tree, "zero"))
	require.NoError(t, err)
	assert.Equal(t, int64(981173106), st.ModTime().Unix())
	b, err := os.ReadFile(filepath.Join(tree, "run"))
	require.NoError(t, err)
	assert.Equal(t, "ab\n", string(b))

	// Out again: the client answers 0 to everything.
	var out, errb bytes.Buffer
	code = serveSCP([]string{"-r", "-p", "-f", "--", tree}, strings.NewReader(strings.Repeat("\x00", 32)), &out, &errb)
	require.Equal(t, 0, code, errb.String())
	sent := out.String()
	assert.True(t, strings.HasPrefix(sent, "T1000000000 0 "), "%q", sent)
	for _, line := range []string{"D0750 0 tree\n", "C0755 3 run\nab\n\x00", "D0700 0 empty\nE\n", "C0600 0 zero\n\x00"} {
		assert.Contains(t, sent, line)
	}
	assert.True(t, strings.HasSuffix(sent, "E\n"), "%q", sent)
}

// TestSourceReportsAndGoesOn: a path that cannot be sent is reported on
// the channel (1 and a line) and the others are still sent, as scp.c does.
func TestSourceReportsAndGoesOn(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "adir"), 0o755))
	var out, errb bytes.Buffer
	code := serveSCP([]string{"-f", "--", filepath.Join(dir, "missing"), filepath.Join(dir, "adir"), filepath.Join(dir, "o[k]")},
		strings.NewReader(strings.Repeat("\x00", 8)), &out, &errb)
	assert.Equal(t, 1, code)
	assert.Equal(t, "\x01scp: "+filepath.Join(dir, "missing")+": No such file or directory\n"+
		"\x01scp: "+filepath.Join(dir, "adir")+": not a regular file\n"+
		"C0644 1 ok\nx\x00", out.String(), "the pattern was expanded in the sandbox")
}
