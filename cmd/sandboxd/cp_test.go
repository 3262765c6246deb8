package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// cp, records and status: a wrong command line is 2; no daemon is 125, or
// 1 for the readiness probe, whose answer is 0 or 1.
func TestCpRecordsStatusExitCodes(t *testing.T) {
	noDaemon := []string{"SANDBOXD_HARNESS_DIR=" + t.TempDir()}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cp", "a"}, exitUsage, "name SRC and DST"},
		{[]string{"cp", "a", "b"}, exitUsage, "exactly one of SRC and DST is sandbox:PATH"},
		{[]string{"cp", "sandbox:/a", "sandbox:/b"}, exitUsage, "exactly one of SRC and DST"},
		{[]string{"cp", "-u", "1000", "sandbox:/a", "b"}, exitUsage, "-u names the owner of what is copied into the sandbox"},
		{[]string{"cp", "sandbox:/etc/hostname", t.TempDir()}, exitOwn, "no sandboxd is serving"},
		{[]string{"cp", "-", "sandbox:/tmp"}, exitOwn, "no sandboxd is serving"},
		{[]string{"records", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"records"}, exitOwn, "no sandboxd is serving"},
		{[]string{"status", "--ready", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"status"}, exitOwn, "no sandboxd is serving"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, noDaemon, tc.args...)
			assert.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, tc.want)
		})
	}
	r := run(t, noDaemon, "status", "--ready")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "not ready: no sandboxd is serving")
}
