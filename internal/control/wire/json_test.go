package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The strings an exec request can carry, each as encoding/json reads it
// back: quotes, backslashes, control characters, HTML's <>&, U+2028, and
// bytes that are not UTF-8 (a file name can be any bytes but NUL and /).
var awkwardStrings = []string{"", "plain", `"quoted" \back\`, "tab\tnl\nnul\x00\x1f", "<a href='x'>&amp;</a>",
	"line\u2028para\u2029", "é 日本 🦀", "\xff\xfe bad \xc3", "\xed\xa0\x80 surrogate in UTF-8"}

// Object writes what encoding/json reads back as the same strings, lists,
// numbers and bools that encoding/json itself would have written.
func TestObjectReadsBackAsEncodingJSONWritesIt(t *testing.T) {
	check := func(t *testing.T, s string, n int, b bool, list []string) {
		var o Object
		o.String("s", s)
		o.Int("n", n)
		o.Bool("b", b)
		o.Strings("list", list)
		type doc struct {
			S    string   `json:"s"`
			N    int      `json:"n"`
			B    bool     `json:"b"`
			List []string `json:"list"`
		}
		var got, want doc
		require.NoError(t, json.Unmarshal(o.Bytes(), &got), "%s", o.Bytes())
		theirs, err := json.Marshal(doc{s, n, b, list})
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(theirs, &want))
		assert.Equal(t, want, got)
	}
	for _, s := range awkwardStrings {
		check(t, s, -7, true, awkwardStrings)
	}
	check(t, "", 0, false, []string{})
	var empty Object
	assert.Equal(t, "{}", string(empty.Bytes()))
}

func FuzzObjectReadsBackAsEncodingJSONWritesIt(f *testing.F) {
	for _, s := range awkwardStrings {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		var o Object
		o.String(s, s)
		o.Strings("l", []string{s, s})
		o.Int("n", n)
		var got map[string]any
		require.NoError(t, json.Unmarshal(o.Bytes(), &got), "%q", o.Bytes())
		theirs, err := json.Marshal(map[string]any{s: s, "l": []string{s, s}, "n": n})
		require.NoError(t, err)
		var want map[string]any
		require.NoError(t, json.Unmarshal(theirs, &want))
		assert.Equal(t, want, got)
	})
}

// An Exit and a Failure read as encoding/json reads them: what the daemon
// writes, and any other document whose members have the fields' types.
func TestExitAndFailureDecodeAsEncodingJSON(t *testing.T) {
	for _, e := range []Exit{{}, {Code: 3}, {Code: 137, Signal: "KILL"}, {Code: 124, TimedOut: true}} {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		var got Exit
		require.NoError(t, got.decode(b))
		assert.Equal(t, e, got)
	}
	for _, s := range awkwardStrings {
		f := Failure{Code: 125, Message: s}
		b, err := json.Marshal(f)
		require.NoError(t, err)
		var got, want Failure
		require.NoError(t, got.decode(b))
		require.NoError(t, json.Unmarshal(b, &want))
		assert.Equal(t, want, got)
	}
	for _, doc := range []string{
		` { "code" : 2 , "signal":"TERM","timed_out":false, "later": {"a":[1,{"b":null}],"c":"}"} } `,
		`{"code":1,"code":4}`, `{"signal":null}`, `{"signal":"\ud83e\udd80 \u00e9\/\ud800 \udc00x"}`,
		`{"code":-0}`, `{"extra":[true,false,null,-1.5e+3,"x"]}`,
	} {
		var got, want Exit
		require.NoError(t, json.Unmarshal([]byte(doc), &want), doc)
		require.NoError(t, got.decode([]byte(doc)), doc)
		assert.Equal(t, want, got, doc)
	}
}

// A document encoding/json refuses is refused too, with the byte it
// stopped at; so is one whose member has the wrong type for its field.
func TestExitRefusesWhatIsNotAnExit(t *testing.T) {
	for _, doc := range []string{``, `{`, `[]`, `{"code":1} x`, `{"code":01}`, `{"code":"1"}`, `{"code":1.5}`,
		`{"signal":"a` + "\x01" + `"}`, `{"signal":"\x"}`, `{"signal":"\u12"}`, `{"timed_out":1}`, `{code:1}`, `{"code":1,}`,
		`{"a":[1,]}`, `{"a":tru}`} {
		var e Exit
		err := e.decode([]byte(doc))
		assert.Error(t, err, "%q", doc)
		var want Exit
		assert.Error(t, json.Unmarshal([]byte(doc), &want), "encoding/json takes %q", doc)
	}
}

func FuzzExitDecodesAsEncodingJSON(f *testing.F) {
	f.Add(`{"code":0}`)
	f.Add(`{"code":137,"signal":"KILL","timed_out":true}`)
	f.Add(`{"signal":"\ud83e\udd80\u0041\"","x":{"y":[1,2]}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var got, want Exit
		wantErr := json.Unmarshal([]byte(doc), &want)
		gotErr := got.decode([]byte(doc))
		if wantErr != nil {
			// encoding/json also refuses numbers too large for an int,
			// which this decoder refuses too (strconv.Atoi).
			assert.Error(t, gotErr, "%q taken, encoding/json: %v", doc, wantErr)
			return
		}
		require.NoError(t, gotErr, "%q", doc)
		if foldsOntoAField(doc, "code", "signal", "timed_out") {
			// encoding/json also takes "Code" for code; the daemon
			// writes the fields' own names, which are all this reads.
			return
		}
		assert.Equal(t, want, got, "%q", doc)
	})
}

// foldsOntoAField says whether a member of the object doc has a name that
// differs from one of fields only in case.
func foldsOntoAField(doc string, fields ...string) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal([]byte(doc), &members) != nil {
		return false
	}
	for k := range members {
		for _, f := range fields {
			if k != f && strings.EqualFold(k, f) {
				return true
			}
		}
	}
	return false
}
