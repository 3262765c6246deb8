package tomlpos

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func path(keys ...any) Path {
	var p Path
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			p = p.Child(k)
		case int:
			p = p.Elem(k)
		}
	}
	return p
}

// TestLine pins the line of each kind of key, where the old probe-based
// reader had to guess: elements of arrays of tables, keys the file wrote
// only in a dotted key or a header, multi-line strings, inline arrays.
func TestLine(t *testing.T) {
	src := `top = 1
a.b.c = 2
source = """
[[steps]]
"""
[[peers]]
name = "db"

[[peers]]
name = "x"
[peers.sub]
deep = true

[x.y.z]
q = 1
list = [
  { k = 1 },
  2,
]
[env]
"quoted key" = "v"
inline = { A = "1",
  B = "2" }
`
	d, err := Parse([]byte(src))
	require.NoError(t, err)
	tests := []struct {
		p    Path
		line int
	}{
		{path("top"), 1},
		{path("a"), 2},
		{path("a", "b", "c"), 2},
		{path("source"), 3},
		{path("peers"), 6},
		{path("peers", 0), 6},
		{path("peers", 0, "name"), 7},
		{path("peers", 1), 9},
		{path("peers", 1, "name"), 10},
		{path("peers", 1, "sub"), 11},
		{path("peers", 1, "sub", "deep"), 12},
		{path("x"), 14},
		{path("x", "y", "z", "q"), 15},
		{path("x", "y", "z", "list"), 16},
		{path("x", "y", "z", "list", 0), 17},
		{path("x", "y", "z", "list", 0, "k"), 17},
		{path("x", "y", "z", "list", 1), 18},
		{path("env", "quoted key"), 21},
		{path("env", "inline", "B"), 23},
		{path("env", "inline", "unknown"), 22}, // its table's line
		{path("nothing"), 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.line, d.Line(tt.p), "%s", tt.p)
	}
	assert.Equal(t, []string{"top", "a", "source", "peers", "x", "env"}, d.Keys(nil))
	assert.Equal(t, []string{"name", "sub"}, d.Keys(path("peers", 1)))
	assert.Equal(t, []string{"A", "B"}, d.Keys(path("env", "inline")))
}

func TestValues(t *testing.T) {
	d, err := Parse([]byte("i = 1\nf = 4096.0\ns = \"x\"\nb = true\narr = [1, \"a\"]\n[[t]]\nk = 1\n"))
	require.NoError(t, err)
	v := d.Values()
	assert.Equal(t, int64(1), v["i"])
	assert.Equal(t, 4096.0, v["f"])
	assert.Equal(t, "x", v["s"])
	assert.Equal(t, true, v["b"])
	assert.Equal(t, []any{int64(1), "a"}, v["arr"])
	assert.Equal(t, []any{map[string]any{"k": int64(1)}}, v["t"])

	d, err = Parse(nil)
	require.NoError(t, err)
	assert.NotNil(t, d.Values())
}

// TestSyntaxError pins the line and the key of documents the decoder
// refuses, both for grammar (the parser stops) and for TOML's rules (a
// duplicate key, a redefined table).
func TestSyntaxError(t *testing.T) {
	tests := []struct {
		src  string
		line int
		key  string
	}{
		{"listen = ", 1, "listen"},
		{"a = 1\na = 2", 2, "a"},
		{"[verifier]\ntimeout_sec = 1\ntimeout_sec = 2", 3, "verifier.timeout_sec"},
		{"[[peers]]\nname = \"a\"\n[[peers]]\nport = ", 4, "peers[1].port"},
		{"[t]\nx = 1\n[t]\n", 3, "t"},
		{"schema_version = \"1.1\"\n[verifier\ntimeout_sec = 1", 2, ""},
		{"a = 1\n[verifier]\nb = {\n c = 1,\n d = [1,\n2, x]}", 6, "verifier.b"},
		{"x = \"\xff\"", 1, "x"},
		{"[metadata]\ndifficult", 2, "metadata"},
		{"d = 1979-13-45", 1, "d"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := Parse([]byte(tt.src))
			var se *SyntaxError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.line, se.Line)
			assert.Equal(t, tt.key, se.Key)
			assert.NotEmpty(t, se.Msg)
		})
	}
}

func TestPathString(t *testing.T) {
	assert.Equal(t, `environment.env.PATH`, path("environment", "env", "PATH").String())
	assert.Equal(t, `peers[1].port`, path("peers", 1, "port").String())
	assert.Equal(t, `agent.env."A=B"`, path("agent", "env", "A=B").String())
	assert.Equal(t, `""`, path("").String())
}
