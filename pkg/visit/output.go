package visit

import (
	"io"
	"os"
	"strings"
)

// TailSize is how much of a visitor's output Tail keeps: enough for a
// pytest summary, small enough for one JSON line.
const TailSize = 8 << 10

// Tail returns the last TailSize bytes of f as valid UTF-8. It reads the
// descriptor the daemon created, never the path: the verifier owns the
// verdict directory and could put a symlink where the file was.
func Tail(f *os.File) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - TailSize
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, TailSize))
	if err != nil && len(b) == 0 {
		return ""
	}
	s := string(b)
	if off > 0 {
		// Cut at a line start when one is near, so the tail reads cleanly.
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < 256 {
			s = s[i+1:]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
