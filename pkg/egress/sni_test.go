package egress

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientHello is the first flight of a real crypto/tls client for
// serverName ("" or an IP address: no server_name extension).
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		c := tls.Client(b, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Handshake() // fails once a is closed
		b.Close()
	}()
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf bytes.Buffer
	chunk := make([]byte, 4096)
	for {
		n, err := a.Read(chunk)
		buf.Write(chunk[:n])
		if _, more, perr := peekedName(buf.Bytes()); err != nil || !more || perr != nil {
			break
		}
	}
	return buf.Bytes()
}

func TestPeekedName(t *testing.T) {
	hello := clientHello(t, "allowed.example")
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		more bool
		err  bool
	}{
		{name: "a ClientHello with SNI", in: hello, want: "allowed.example"},
		{name: "a ClientHello without SNI", in: clientHello(t, "192.0.2.1")},
		{name: "half a ClientHello", in: hello[:len(hello)/2], more: true},
		{name: "a record header alone", in: hello[:3], more: true},
		{name: "HTTP with Host", in: []byte("GET / HTTP/1.1\r\nHost: Allowed.Example:8080\r\nAccept: */*\r\n\r\n"), want: "Allowed.Example"},
		{name: "HTTP with an IPv6 Host", in: []byte("GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n"), want: "2001:db8::1"},
		{name: "HTTP without Host", in: []byte("GET / HTTP/1.0\r\n\r\n")},
		{name: "HTTP with two Hosts", in: []byte("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"), err: true},
		{name: "an HTTP head not yet complete", in: []byte("POST /x HTTP/1.1\r\nHost: a.ex"), more: true},
		{name: "a method not yet complete", in: []byte("GE"), more: true},
		{name: "an SSH banner", in: []byte("SSH-2.0-OpenSSH_9.2\r\n"), err: true},
		{name: "a Redis command", in: []byte("*1\r\n$4\r\nPING\r\n"), err: true},
		{name: "a TLS alert", in: []byte{0x15, 3, 3, 0, 2, 2, 40}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, more, err := peekedName(tc.in)
			assert.Equal(t, tc.want, name)
			assert.Equal(t, tc.more, more)
			assert.Equal(t, tc.err, err != nil, "%v", err)
		})
	}
}

// The ClientHello parser never panics, never reads past its input, and a
// name it returns is bytes of that input.
func FuzzPeekedName(f *testing.F) {
	f.Add(clientHello(f, "allowed.example"))
	f.Add(clientHello(f, ""))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, more, err := peekedName(b)
		if more || err != nil {
			require.Empty(t, name)
			return
		}
		if name != "" {
			require.True(t, bytes.Contains(b, []byte(name)), "name %q is not in the input", name)
		}
	})
}
