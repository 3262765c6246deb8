package sftpd

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSCP pins which exec commands the legacy scp server takes over: what
// OpenSSH's scp -O, paramiko's scp module and asyncssh send, split as sh
// splits them; anything a shell would interpret stays the shell's.
func TestSCP(t *testing.T) {
	for _, tc := range []struct {
		command string
		want    []string // nil: not taken over
	}{
		// OpenSSH's scp -O (9.x): options, then -t or -f, "--" before a dash.
		{"scp -t ./in.bin", []string{"scp", "-t", "--", "./in.bin"}},
		{"scp -v -r -p -d -t -- -odd", []string{"scp", "-r", "-p", "-d", "-t", "--", "-odd"}},
		{"scp -f data/*.txt", []string{"scp", "-f", "--", "data/*.txt"}},
		{"/usr/bin/scp -f a b", []string{"scp", "-f", "--", "a", "b"}},
		// paramiko's scp module quotes with sh's single quotes.
		{`scp -r -p -t 'my dir/it'"'"'s'`, []string{"scp", "-r", "-p", "-t", "--", "my dir/it's"}},
		{`scp -f 'lit*eral' "q?"`, []string{"scp", "-f", "--", `lit\*eral`, `q\?`}},
		{`scp -f a\ b`, []string{"scp", "-f", "--", "a b"}},
		{"scp -prt dst", []string{"scp", "-p", "-r", "-t", "--", "dst"}},
		// The shell's.
		{"scp -t $HOME/x", nil},
		{"scp -t ~/x", nil},
		{"scp -t x; rm -rf /", nil},
		{"scp -t `id`", nil},
		{"scp -t x > y", nil},
		{`scp -t "$x"`, nil},
		{"scp -t *.txt", nil},   // a sink target is never a glob
		{"scp -t a b", nil},     // one target
		{"scp -t", nil},         // none
		{"scp -x -t a", nil},    // unknown option
		{"scp -t -f a", nil},    // both directions
		{"scp a b", nil},        // a client, not a server
		{"scpx -t a", nil},      // another program
		{"FOO=1 scp -t a", nil}, // an assignment first
		{"scp -t 'open", nil},   // unterminated
	} {
		got, ok := SCP(tc.command)
		if tc.want == nil {
			assert.False(t, ok, "%q is the shell's, not ours: %q", tc.command, got)
			continue
		}
		if assert.True(t, ok, tc.command) {
			assert.Equal(t, tc.want, got, tc.command)
		}
	}
}

// A command longer than any scp client sends is never split: it runs in
// the agent's shell. One just below the bound is still scp's.
func TestSCPBoundsTheCommandItSplits(t *testing.T) {
	long := "/tmp/" + strings.Repeat("a", maxSCPCommand-len("scp -t /tmp/")-1)
	args, ok := SCP("scp -t " + long)
	require.True(t, ok)
	assert.Equal(t, []string{"scp", "-t", "--", long}, args)
	_, ok = SCP("scp -t " + long + "bb")
	assert.False(t, ok, "over the bound")
	_, ok = SCP("bash -c '" + strings.Repeat("x", 1<<20) + "'")
	assert.False(t, ok)
}
