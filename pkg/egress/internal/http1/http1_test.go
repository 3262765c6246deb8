package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func keepHost(h string) (string, error) { return strings.ToLower(h), nil }

// TestReadRequestFraming pins how a request body is delimited, and that every
// ambiguous combination is refused with the status the client gets, not read
// one way here and another way by the next hop.
func TestReadRequestFraming(t *testing.T) {
	tests := []struct {
		name, head string
		want       Framing
		status     int // 0: accepted
	}{
		{"no body", "", Framing{Kind: NoBody}, 0},
		{"length", "Content-Length: 5\r\n", Framing{Kind: ByLength, Length: 5}, 0},
		{"agreeing lengths", "Content-Length: 5, 5\r\n", Framing{Kind: ByLength, Length: 5}, 0},
		{"chunked", "Transfer-Encoding: chunked\r\n", Framing{Kind: Chunked}, 0},
		{"length and chunked", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", Framing{}, 400},
		{"conflicting lengths", "Content-Length: 5\r\nContent-Length: 6\r\n", Framing{}, 400},
		{"hex length", "Content-Length: 0x5\r\n", Framing{}, 400},
		{"other coding", "Transfer-Encoding: gzip, chunked\r\n", Framing{}, 501},
		{"space before colon", "Transfer-Encoding : chunked\r\n", Framing{}, 400},
		{"folded line", "X: y\r\n Transfer-Encoding: chunked\r\n", Framing{}, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader("POST http://A.example/x HTTP/1.1\r\n"+tt.head+"\r\n"), BufSize)
			req, err := ReadRequest(br, keepHost)
			if tt.status != 0 {
				var pe *Error
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tt.status, pe.Status)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, req.Body)
			assert.Equal(t, "a.example", req.Host)
			assert.Equal(t, uint16(80), req.Port)
			assert.Equal(t, "/x", req.Path)
		})
	}
}

// TestForwardedRequestDropsHopByHop pins what goes upstream: origin form,
// a Host from the target, fresh framing, and no field that describes the
// client's connection.
func TestForwardedRequestDropsHopByHop(t *testing.T) {
	in := "POST http://a.example:8080/p?q HTTP/1.1\r\nHost: evil.example\r\nConnection: close, X-Drop\r\n" +
		"X-Drop: 1\r\nProxy-Authorization: Basic eA==\r\nX-Keep: 2\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	br := bufio.NewReaderSize(strings.NewReader(in), BufSize)
	req, err := ReadRequest(br, keepHost)
	require.NoError(t, err)
	assert.True(t, req.Close)

	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	WriteRequestHead(w, req, Framing{Kind: ByLength, Length: 3})
	_, rerr, werr := CopyBody(w, BodyReader(br, req.Body), Framing{Kind: ByLength, Length: 3})
	require.NoError(t, rerr)
	require.NoError(t, werr)
	assert.Equal(t, "POST /p?q HTTP/1.1\r\nHost: a.example:8080\r\nX-Keep: 2\r\nContent-Length: 3\r\n\r\nabc", out.String())
}

// TestResponseFaultsAre502 pins that an upstream response that breaks the
// grammar is refused as a whole, as a 502.
func TestResponseFaultsAre502(t *testing.T) {
	for _, in := range []string{
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
	} {
		_, err := ReadResponse(bufio.NewReader(strings.NewReader(in)), "GET")
		var pe *Error
		require.ErrorAs(t, err, &pe, "%q", in)
		assert.Equal(t, 502, pe.Status, "%q", in)
	}
}

// TestBodyCutShort pins that a body that ends early is an error, never a
// complete message.
func TestBodyCutShort(t *testing.T) {
	for _, f := range []Framing{{Kind: ByLength, Length: 10}, {Kind: Chunked}} {
		br := bufio.NewReader(strings.NewReader("5\r\nab"))
		_, err := io.ReadAll(BodyReader(br, f))
		assert.True(t, errors.Is(err, io.ErrUnexpectedEOF), "%v: %v", f, err)
	}
}
