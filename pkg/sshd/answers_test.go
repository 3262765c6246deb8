package sshd

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Answers is the readiness probe's check of the SSH door: a version line
// from a wildcard listener (dialled over IPv4 loopback), and a clear error
// for something else on the port, or nothing.
func TestAnswersReadsTheVersionLine(t *testing.T) {
	serve := func(banner string) net.Addr {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(banner))
				c.Close()
			}
		}()
		return ln.Addr()
	}
	assert.NoError(t, Answers(serve("SSH-2.0-sandboxd\r\n")))
	assert.ErrorContains(t, Answers(serve("HTTP/1.0 400 Bad Request\r\n")), "not SSH")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr()
	ln.Close()
	assert.Error(t, Answers(addr), "nothing listens")
}
