package task

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve --peer NAME:PORT[=TARGET] reads as a [[peers]] table does.
func TestParsePeer(t *testing.T) {
	for in, want := range map[string]Peer{
		"db:5432":                    {Name: "db", Port: 5432, Target: "127.0.0.1:5432"},
		"DB.internal:5432=db:15432":  {Name: "db.internal", Port: 5432, Target: "db:15432"},
		"search:9200=[::1]:19200":    {Name: "search", Port: 9200, Target: "[::1]:19200"},
		" cache:6379=10.0.0.5:6379 ": {Name: "cache", Port: 6379, Target: "10.0.0.5:6379"},
	} {
		got, err := ParsePeer(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]string{
		"db":               "has no port",
		"db:0":             "not a port",
		"db:http":          "not a port",
		"localhost:80":     "not a host name",
		"under_score:80":   "not a host name",
		":80":              "not a host name",
		"db:5432=db":       "not a substrate address",
		"db:5432=:5432":    "it has no host",
		"db:5432=db:99999": "the port must be a number",
	} {
		_, err := ParsePeer(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}
