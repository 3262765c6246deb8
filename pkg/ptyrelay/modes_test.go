package ptyrelay_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

func TestApplyModes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		modes []byte
		check func(t *testing.T, tio *unix.Termios)
	}{
		{"erase and echo", []byte{3, 0, 0, 0, 0x7f, 53, 0, 0, 0, 0, 0}, func(t *testing.T, tio *unix.Termios) {
			assert.Equal(t, uint8(0x7f), tio.Cc[unix.VERASE])
			assert.Zero(t, tio.Lflag&unix.ECHO)
		}},
		{"255 disables a character", []byte{6, 0, 0, 0, 255, 0}, func(t *testing.T, tio *unix.Termios) {
			assert.Equal(t, uint8(0), tio.Cc[unix.VEOL])
		}},
		{"stops at TTY_OP_END", []byte{53, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1}, func(t *testing.T, tio *unix.Termios) {
			assert.Zero(t, tio.Lflag&unix.ECHO)
			assert.Equal(t, uint8(0), tio.Cc[unix.VERASE])
		}},
		{"stops at an undefined opcode", []byte{160, 0, 0, 0, 0, 53, 0, 0, 0, 0}, func(t *testing.T, tio *unix.Termios) {
			assert.NotZero(t, tio.Lflag&unix.ECHO)
		}},
		{"truncated argument ignored", []byte{53, 0, 0}, func(t *testing.T, tio *unix.Termios) {
			assert.NotZero(t, tio.Lflag&unix.ECHO)
		}},
		{"unknown opcode below 160 skipped", []byte{100, 0, 0, 0, 1, 42, 0, 0, 0, 1}, func(t *testing.T, tio *unix.Termios) {
			assert.NotZero(t, tio.Iflag&unix.IUTF8)
		}},
		{"cs7 and speed", []byte{90, 0, 0, 0, 1, 129, 0, 0, 0x96, 0x00}, func(t *testing.T, tio *unix.Termios) {
			assert.Equal(t, uint32(unix.CS7), tio.Cflag&unix.CSIZE)
			assert.Equal(t, uint32(unix.B38400), tio.Cflag&unix.CBAUD)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tio := &unix.Termios{Lflag: unix.ECHO, Cflag: unix.CS8}
			ptyrelay.ApplyModes(tio, tc.modes)
			tc.check(t, tio)
		})
	}
}

func TestSignalNames(t *testing.T) {
	assert.Equal(t, "KILL", ptyrelay.SignalName(unix.SIGKILL))
	sig, ok := ptyrelay.ParseSignal("TERM")
	assert.True(t, ok)
	assert.Equal(t, unix.SIGTERM, sig)
	_, ok = ptyrelay.ParseSignal("NOPE")
	assert.False(t, ok)
}

func FuzzApplyModes(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 8, 0})
	f.Fuzz(func(t *testing.T, modes []byte) {
		ptyrelay.ApplyModes(&unix.Termios{}, modes)
	})
}
