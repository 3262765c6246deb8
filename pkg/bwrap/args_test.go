package bwrap

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want Version
	}{
		{"bubblewrap 0.4.1\n", Version{0, 4, 1}},
		{"bubblewrap 0.8.0", Version{0, 8, 0}},
		{"bubblewrap 0.11.0-1ubuntu2", Version{0, 11, 0}},
		{"bubblewrap 0.9", Version{0, 9, 0}},
	}
	for _, tc := range tests {
		v, err := ParseVersion(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, v)
	}
	_, err := ParseVersion("flatpak 1.0")
	assert.Error(t, err)
}

// The argv never uses an option newer than the bwrap found
// (docs/failures.md#options-newer-than-the-bwrap-are-never-emitted).
func TestArgvRefusesOptionsNewerThanBwrap(t *testing.T) {
	old := Version{0, 4, 1}
	for _, opt := range []string{"--clearenv", "--disable-userns", "--perms", "--size"} {
		_, err := NewArgs(old).Add(opt).Build()
		require.Error(t, err, opt)
		assert.True(t, errors.Is(err, ErrUnsupportedOption), opt)
		assert.Contains(t, err.Error(), "found 0.4.1")
	}
	_, err := NewArgs(Version{0, 8, 0}).Add("--clearenv").Add("--disable-userns").Build()
	assert.NoError(t, err)
	_, err = NewArgs(Version{0, 8, 0}).Add("--made-up").Build()
	assert.ErrorIs(t, err, ErrUnsupportedOption, "an option missing from the table can never be emitted")
}

// The full argv for a sandbox — the one sessions will use — builds on the
// oldest supported bwrap
// (docs/failures.md#options-newer-than-the-bwrap-are-never-emitted,
// docs/failures.md#probe-uses-the-session-options).
func TestFullArgvBuildsOnOldestBwrap(t *testing.T) {
	cfg := &Config{Workdir: "/", Hide: []string{"/media/sandboxd"}, Mask: []string{"/logs/verifier"},
		Files: []DataFile{{Path: "/etc/hosts", Data: []byte("127.0.0.1 localhost\n")}}}
	for _, v := range []Version{Minimum, {0, 4, 1}, {0, 8, 0}} {
		opts, data, err := buildOptions(v, cfg)
		require.NoError(t, err, v)
		closeAll(data)
		joined := strings.Join(opts, " ")
		assert.Contains(t, joined, "--unshare-net")
		assert.Contains(t, joined, "--cap-drop ALL")
		assert.NotContains(t, joined, "--clearenv")
		if v.Less(Version{0, 5, 0}) {
			assert.NotContains(t, joined, "--perms")
		}
	}
}

// The info fd is read until the JSON is complete, however it arrives
// (docs/failures.md#info-fd-read-to-the-end-of-its-json).
func TestInfoFDReadUntilJSONComplete(t *testing.T) {
	doc := `{
    "child-pid": 4242,
    "cgroup-namespace": 4026532801
}`
	info, err := parseInfo(iotest.OneByteReader(strings.NewReader(doc)))
	require.NoError(t, err)
	assert.Equal(t, 4242, info.ChildPID)

	_, err = parseInfo(strings.NewReader(""))
	assert.ErrorIs(t, err, ErrDied, "EOF with nothing read means bwrap died")
	_, err = parseInfo(strings.NewReader(`{"child-pid": 12`))
	assert.ErrorIs(t, err, ErrDied)
}

func FuzzParseInfo(f *testing.F) {
	f.Add([]byte(`{"child-pid": 1}`))
	f.Add([]byte(`{"child-pid": -1}`))
	f.Add([]byte(`{"child-pid": 1e99}`))
	f.Add([]byte(`{"child-pid"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseInfo(iotest.HalfReader(strings.NewReader(string(b))))
		if err == nil && info.ChildPID <= 0 {
			t.Fatalf("accepted a non-positive child pid from %q", b)
		}
	})
}
