package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every decision lands in the audit log with its fields, and a refusal says
// why.
func TestAuditRecordsDecisions(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenAudit(dir, 0, 0)
	require.NoError(t, err)
	up := okUpstream(t)
	pol, err := ParsePolicy("allowlist", []string{"up.test"}, []string{"127.0.0.0/8"})
	require.NoError(t, err)
	proxy := startProxy(t, &Proxy{Policy: pol, Audit: a, Label: "agent", Resolver: resolverOf("up.test", "127.0.0.1")})
	roundTrip(t, proxy, "GET http://up.test:"+up.port+"/ HTTP/1.1\r\nConnection: close\r\n\r\n", "GET")
	roundTrip(t, proxy, "GET http://other.test/ HTTP/1.1\r\n\r\n", "GET")
	require.Eventually(t, func() bool { return len(readAudit(t, filepath.Join(dir, "egress.log"))) >= 3 }, 5e9, 1e7)
	require.NoError(t, a.Close())

	recs := readAudit(t, filepath.Join(dir, "egress.log"))
	require.Len(t, recs, 3)
	// The two connections run concurrently in the proxy: find records by kind.
	find := func(msg, verdict string) map[string]any {
		for _, r := range recs {
			if r["msg"] == msg && (verdict == "" || r["verdict"] == verdict) {
				return r
			}
		}
		t.Fatalf("no %s record with verdict %q in %v", msg, verdict, recs)
		return nil
	}
	allow := find("decision", "allow")
	assert.Equal(t, "agent", allow["proxy"])
	assert.Equal(t, "GET", allow["method"])
	assert.Equal(t, "up.test", allow["host"])
	assert.Equal(t, "127.0.0.1:"+up.port, allow["addr"])
	assert.NotEmpty(t, allow["time"])
	assert.NotEmpty(t, allow["client"])
	closed := find("close", "")
	assert.EqualValues(t, 200, closed["status"])
	assert.EqualValues(t, 19, closed["bytes_down"])
	assert.Contains(t, closed, "duration")
	deny := find("decision", "deny")
	assert.Equal(t, "other.test", deny["host"])
	assert.Contains(t, deny["reason"], "blocked-by-allowlist")
}

func readAudit(t *testing.T, path string) []map[string]any {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	return out
}

// The log is bounded: files rotate at maxBytes and only keep of them stay.
func TestAuditRotationBounded(t *testing.T) {
	dir := t.TempDir()
	const maxBytes, keep = 1000, 2
	a, err := OpenAudit(dir, maxBytes, keep)
	require.NoError(t, err)
	for i := range 100 {
		a.record(event{kind: "decision", host: fmt.Sprintf("host%d.test", i), verdict: "deny", reason: "test"})
	}
	require.NoError(t, a.Close())
	names, err := filepath.Glob(filepath.Join(dir, "egress.log*"))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"egress.log", "egress.log.1", "egress.log.2"}, baseNames(names))
	for _, n := range names {
		st, err := os.Stat(n)
		require.NoError(t, err)
		assert.LessOrEqual(t, st.Size(), int64(maxBytes), n)
		recs := readAudit(t, n) // whole lines only, in every file
		assert.NotEmpty(t, recs)
	}
	last := readAudit(t, filepath.Join(dir, "egress.log"))
	assert.Equal(t, "host99.test", last[len(last)-1]["host"])
}

func baseNames(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	return out
}
