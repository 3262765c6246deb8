package sandboxtest

import (
	"io"
	"net"
	"testing"
)

// ServeLine answers every connection accepted on ln with line (a newline is
// added) and closes it, until the test ends and ln with it: a service that
// says which one a client reached.
func ServeLine(t testing.TB, ln net.Listener, line string) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, line+"\n")
			c.Close()
		}
	}()
}
