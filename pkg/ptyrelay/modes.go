package ptyrelay

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// Terminal modes as encoded in an SSH pty-req (RFC 4254 §8, RFC 8160 for
// IUTF8). The encoding is a sequence of (opcode byte, uint32 argument) pairs
// ended by opcode 0. Clients send the modes of their own terminal so that the
// remote one behaves the same (the erase character, above all: a Mac sends
// DEL, a Linux console ^H).
const (
	opEnd    = 0
	opOSpeed = 129
	// Opcodes 160 to 255 are not defined yet and stop the parsing (RFC 4254 §8).
	opFirstUndefined = 160
)

// ccIndex maps control-character opcodes to the termios c_cc slot. VDSUSP
// (11), VFLUSH (15) and VSTATUS (17) have no Linux counterpart and are skipped.
var ccIndex = map[byte]int{
	1: unix.VINTR, 2: unix.VQUIT, 3: unix.VERASE, 4: unix.VKILL, 5: unix.VEOF,
	6: unix.VEOL, 7: unix.VEOL2, 8: unix.VSTART, 9: unix.VSTOP, 10: unix.VSUSP,
	12: unix.VREPRINT, 13: unix.VWERASE, 14: unix.VLNEXT, 16: unix.VSWTC,
	18: unix.VDISCARD,
}

type flagField int

const (
	iflag flagField = iota
	lflag
	oflag
	cflag
)

// flagBits maps boolean opcodes to the termios field and bit they set.
var flagBits = map[byte]struct {
	field flagField
	bit   uint32
}{
	30: {iflag, unix.IGNPAR}, 31: {iflag, unix.PARMRK}, 32: {iflag, unix.INPCK},
	33: {iflag, unix.ISTRIP}, 34: {iflag, unix.INLCR}, 35: {iflag, unix.IGNCR},
	36: {iflag, unix.ICRNL}, 37: {iflag, unix.IUCLC}, 38: {iflag, unix.IXON},
	39: {iflag, unix.IXANY}, 40: {iflag, unix.IXOFF}, 41: {iflag, unix.IMAXBEL},
	42: {iflag, unix.IUTF8},
	50: {lflag, unix.ISIG}, 51: {lflag, unix.ICANON}, 52: {lflag, unix.XCASE},
	53: {lflag, unix.ECHO}, 54: {lflag, unix.ECHOE}, 55: {lflag, unix.ECHOK},
	56: {lflag, unix.ECHONL}, 57: {lflag, unix.NOFLSH}, 58: {lflag, unix.TOSTOP},
	59: {lflag, unix.IEXTEN}, 60: {lflag, unix.ECHOCTL}, 61: {lflag, unix.ECHOKE},
	62: {lflag, unix.PENDIN},
	70: {oflag, unix.OPOST}, 71: {oflag, unix.OLCUC}, 72: {oflag, unix.ONLCR},
	73: {oflag, unix.OCRNL}, 74: {oflag, unix.ONOCR}, 75: {oflag, unix.ONLRET},
	92: {cflag, unix.PARENB}, 93: {cflag, unix.PARODD},
}

// speeds maps a baud rate to its termios code; other rates are ignored, as
// the kernel's own pty ignores the line speed anyway.
var speeds = map[uint32]uint32{
	0: unix.B0, 50: unix.B50, 75: unix.B75, 110: unix.B110, 134: unix.B134,
	150: unix.B150, 200: unix.B200, 300: unix.B300, 600: unix.B600,
	1200: unix.B1200, 1800: unix.B1800, 2400: unix.B2400, 4800: unix.B4800,
	9600: unix.B9600, 19200: unix.B19200, 38400: unix.B38400, 57600: unix.B57600,
	115200: unix.B115200, 230400: unix.B230400, 460800: unix.B460800,
	500000: unix.B500000, 576000: unix.B576000, 921600: unix.B921600,
	1000000: unix.B1000000,
}

// ApplyModes sets the RFC 4254 §8 encoded modes on t. Parsing stops at
// TTY_OP_END, at an undefined opcode (≥ 160), or where the encoding is cut
// short; what was parsed until then is applied, as OpenSSH's sshd does.
// Unknown opcodes below 160 are skipped with their argument.
func ApplyModes(t *unix.Termios, modes []byte) {
	for len(modes) >= 5 {
		op := modes[0]
		if op == opEnd || op >= opFirstUndefined {
			return
		}
		arg := binary.BigEndian.Uint32(modes[1:5])
		modes = modes[5:]
		if i, ok := ccIndex[op]; ok {
			// 255 means "disabled" on the wire (OpenSSH encodes its
			// _POSIX_VDISABLE so); Linux's disabled value is 0. Taken
			// literally, a ÿ would end every line.
			if arg == 255 {
				arg = 0
			}
			t.Cc[i] = uint8(arg)
			continue
		}
		if f, ok := flagBits[op]; ok {
			field := &t.Iflag
			switch f.field {
			case lflag:
				field = &t.Lflag
			case oflag:
				field = &t.Oflag
			case cflag:
				field = &t.Cflag
			}
			if arg != 0 {
				*field |= f.bit
			} else {
				*field &^= f.bit
			}
			continue
		}
		switch op {
		case 90, 91: // CS7, CS8: character size, only when set
			if arg != 0 {
				t.Cflag &^= unix.CSIZE
				if op == 90 {
					t.Cflag |= unix.CS7
				} else {
					t.Cflag |= unix.CS8
				}
			}
		case opOSpeed:
			// The line speed lives in c_cflag for TCSETS; the input speed
			// follows the output speed when CIBAUD is zero, so ISPEED needs
			// nothing of its own.
			if code, ok := speeds[arg]; ok {
				t.Cflag = t.Cflag&^unix.CBAUD | code
			}
		}
	}
}
