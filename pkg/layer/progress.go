package layer

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// lineWriter prefixes every line written to it and writes whole lines under
// a shared lock, so that the progress of groups built in parallel interleaves
// by line, not by byte.
type lineWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.mu.Lock()
		fmt.Fprintf(l.w, "%s%s\n", l.prefix, l.buf[:i])
		l.mu.Unlock()
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}
