package ptyrelay_test

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// parsedPrefix is the part of an RFC 4254 §8 mode string that a parser must
// read: whole (opcode, uint32) records up to TTY_OP_END, the first undefined
// opcode (160 and above) or the first cut-short record.
func parsedPrefix(modes []byte) []byte {
	n := 0
	for len(modes)-n >= 5 {
		op := modes[n]
		if op == 0 || op >= 160 {
			break
		}
		n += 5
	}
	return modes[:n]
}

// FuzzApplyModesProperties pins what clients rely on beyond "does not
// crash": parsing stops where RFC 4254 says it stops (nothing after the end
// marker or an undefined opcode is applied), applying the same modes twice
// changes nothing more, and only the character size and line speed bits that
// exist are ever set.
func FuzzApplyModesProperties(f *testing.F) {
	record := func(op byte, arg uint32) []byte {
		b := []byte{op, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], arg)
		return b
	}
	var openssh []byte
	for _, r := range [][2]uint32{{1, 3}, {3, 0x7f}, {128, 38400}, {129, 38400}, {36, 1}, {42, 1}, {53, 1}, {91, 1}} {
		openssh = append(openssh, record(byte(r[0]), r[1])...)
	}
	f.Add(append(openssh, 0), []byte{})
	f.Add(record(3, 255), record(90, 1))
	f.Add(record(129, 12345), record(129, 115200))
	f.Add(append(record(200, 1), record(3, 8)...), record(0, 0))
	f.Add([]byte{3, 0, 0}, []byte{0, 8})
	f.Fuzz(func(t *testing.T, modes, junk []byte) {
		var once, twice, prefixed unix.Termios
		ptyrelay.ApplyModes(&once, modes)
		ptyrelay.ApplyModes(&twice, modes)
		ptyrelay.ApplyModes(&twice, modes)
		if once != twice {
			t.Fatalf("applying %x twice differs from once:\n%+v\n%+v", modes, once, twice)
		}
		// Whatever follows the end marker is never read.
		p := parsedPrefix(modes)
		tail := append(append(append([]byte{}, p...), 0), junk...)
		ptyrelay.ApplyModes(&prefixed, tail)
		if prefixed != once {
			t.Fatalf("%x and %x (its parsed part, an end marker and junk) differ:\n%+v\n%+v", modes, tail, once, prefixed)
		}
		if cs := once.Cflag & unix.CSIZE; cs != 0 && cs != unix.CS7 && cs != unix.CS8 {
			t.Fatalf("character size %#o from %x", cs, modes)
		}
		if once.Cflag&^(unix.CSIZE|unix.CBAUD|unix.PARENB|unix.PARODD) != 0 {
			t.Fatalf("c_cflag bits %#o set that no opcode names, from %x", once.Cflag, modes)
		}
	})
}

// FuzzSize checks the clamp every pty-req and window-change goes through.
func FuzzSize(f *testing.F) {
	f.Add(uint32(80), uint32(24), uint32(0), uint32(0))
	f.Add(uint32(1<<32-1), uint32(1<<16), uint32(1<<16), uint32(1<<32-1))
	f.Fuzz(func(t *testing.T, cols, rows, x, y uint32) {
		s := ptyrelay.Size{Cols: cols, Rows: rows, XPixels: x, YPixels: y}.Clamp()
		if s.Cols != min(cols, ptyrelay.MaxCols) || s.Rows != min(rows, ptyrelay.MaxRows) || s.XPixels > 65535 || s.YPixels > 65535 {
			t.Fatalf("%dx%d (%dx%d px) clamped to %+v", cols, rows, x, y, s)
		}
		if s.Clamp() != s {
			t.Fatalf("clamp is not idempotent on %+v", s)
		}
	})
}
