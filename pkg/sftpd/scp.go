package sftpd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The legacy scp protocol (rcp's), as OpenSSH's scp speaks it when started
// with -t (sink: the client sends) or -f (source: the client receives).
// Every message is a control line — C (file), D (directory), E (end of
// directory), T (times of the next C or D) — or a file's bytes, and each is
// answered with one byte: 0 for ok, 1 and a line for an error the transfer
// survives, 2 and a line for a fatal one. Behaviour follows OpenSSH's scp.c:
// a received name that is empty, ".", ".." or holds a slash ends the
// transfer; without -p, modes are masked by the umask; a directory is made
// writable by its owner while it is filled.

const (
	// modeMask is what a C or D line carries of a mode: permissions with
	// setuid and setgid, not the sticky bit (scp.c's FILEMODEMASK).
	modeMask = 0o6777
	// maxLine bounds a control line; a file name is at most 255 bytes and
	// a line is a few numbers more.
	maxLine = 64 << 10
	// chunk is the copy buffer.
	chunk = 256 << 10
)

// errFatal ends the transfer: the peer has been told, or the stream is lost.
var errFatal = errors.New("scp: transfer ended")

type scp struct {
	in        *bufio.Reader
	out       io.Writer
	stderr    io.Writer
	recursive bool
	preserve  bool
	targetDir bool // -d: the sink's target must be a directory
	umask     int
	errs      int
	buf       []byte
}

// serveSCP runs the sink or the source with the arguments SCP made.
func serveSCP(args []string, in io.Reader, out, stderr io.Writer) int {
	s := &scp{in: bufio.NewReaderSize(in, chunk), out: out, stderr: stderr, buf: make([]byte, chunk)}
	mode := ""
	for len(args) > 0 && args[0] != "--" {
		switch args[0] {
		case "-r":
			s.recursive = true
		case "-p":
			s.preserve = true
		case "-d":
			s.targetDir = true
		case "-t", "-f":
			mode = args[0]
		default:
			fmt.Fprintf(stderr, "sandboxd: scp: unknown option %q\n", args[0])
			return 2
		}
		args = args[1:]
	}
	if len(args) > 0 {
		args = args[1:]
	}
	s.umask = unix.Umask(0)
	unix.Umask(s.umask)
	var err error
	switch {
	case mode == "-t" && len(args) == 1:
		err = s.sink(args[0], true)
	case mode == "-f" && len(args) > 0:
		err = s.source(args)
	default:
		fmt.Fprintln(stderr, "sandboxd: scp: give -t TARGET or -f PATH...")
		return 2
	}
	if err != nil || s.errs > 0 {
		return 1
	}
	return 0
}

// warn reports an error the transfer survives, as scp.c's run_err does in
// the remote role: on the channel, where the client prints it.
func (s *scp) warn(format string, args ...any) {
	s.errs++
	fmt.Fprintf(s.out, "\x01scp: "+format+"\n", args...)
}

// fatal reports an error that ends the transfer.
func (s *scp) fatal(format string, args ...any) error {
	s.errs++
	fmt.Fprintf(s.out, "\x02scp: "+format+"\n", args...)
	return errFatal
}

func (s *scp) ack() error {
	if _, err := s.out.Write([]byte{0}); err != nil {
		return errFatal
	}
	return nil
}

// response reads the peer's answer: nil for ok, errWarned for an error the
// peer reported (the entry is skipped), errFatal when it gave up or left.
func (s *scp) response() error {
	c, err := s.in.ReadByte()
	if err != nil {
		return errFatal
	}
	switch c {
	case 0:
		return nil
	case 1, 2:
		line, _ := s.readLine()
		fmt.Fprintln(s.stderr, strings.TrimSpace(line))
		if c == 2 {
			return errFatal
		}
		s.errs++
		return errWarned
	}
	return errFatal
}

var errWarned = errors.New("scp: the peer reported an error")

// readLine reads a control line without its newline; io.EOF at a clean end.
func (s *scp) readLine() (string, error) {
	var b []byte
	for {
		frag, err := s.in.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > maxLine {
			return "", errFatal
		}
		if err == nil {
			return string(b[:len(b)-1]), nil
		}
		if err != bufio.ErrBufferFull {
			if len(b) == 0 && err == io.EOF {
				return "", io.EOF
			}
			return "", errFatal
		}
	}
}

// times are a T line's, for the next file or directory.
type times struct {
	set          bool
	mtime, atime time.Time
}

func (t times) apply(path string) error {
	if !t.set {
		return nil
	}
	return os.Chtimes(path, t.atime, t.mtime)
}

// sink receives into target: a directory to fill, or, for a single file,
// the file's name. top is the command's own target; below it, every name
// is a directory being filled.
func (s *scp) sink(target string, top bool) error {
	if top && s.targetDir {
		if st, err := os.Stat(target); err != nil || !st.IsDir() {
			if err == nil {
				err = syscall.ENOTDIR
			}
			return s.fatal("%s: %v", target, errno(err))
		}
	}
	if err := s.ack(); err != nil {
		return err
	}
	targetIsDir := false
	if st, err := os.Stat(target); err == nil && st.IsDir() {
		targetIsDir = true
	}
	var t times
	for first := true; ; first = false {
		line, err := s.readLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if line == "" {
			return s.fatal("protocol error: unexpected <newline>")
		}
		switch line[0] {
		case 1, 2:
			fmt.Fprintln(s.stderr, line[1:])
			if line[0] == 2 {
				return errFatal
			}
			s.errs++
			continue
		case 'E':
			if top {
				return s.fatal("protocol error: unexpected E line")
			}
			return s.ack()
		case 'T':
			if t, err = parseTimes(line[1:]); err != nil {
				return s.fatal("protocol error: %v", err)
			}
			if err := s.ack(); err != nil {
				return err
			}
			continue
		case 'C', 'D':
		default:
			if first {
				return s.fatal("%s", line)
			}
			return s.fatal("protocol error: expected control record")
		}
		mode, size, name, err := parseEntry(line[1:])
		if err != nil {
			return s.fatal("protocol error: %v", err)
		}
		if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
			return s.fatal("error: unexpected filename: %s", name)
		}
		if !s.preserve {
			mode &^= uint32(s.umask)
		}
		path := target
		if targetIsDir || !top {
			path = filepath.Join(target, name)
		}
		if line[0] == 'D' {
			if !s.recursive {
				return s.fatal("protocol error: received directory without -r")
			}
			if err := s.sinkDir(path, mode, t); err != nil {
				return err
			}
		} else if err := s.sinkFile(path, mode, size, t); err != nil {
			return err
		}
		t = times{}
	}
}

// sinkDir makes (or reuses) a directory and fills it.
func (s *scp) sinkDir(path string, mode uint32, t times) error {
	// A refused D line is answered with the error, and the client then
	// sends nothing of that directory.
	setMode := s.preserve
	if st, err := os.Stat(path); err == nil {
		if !st.IsDir() {
			s.warn("%s: %v", path, errno(syscall.ENOTDIR))
			return nil
		}
		if s.preserve {
			unix.Chmod(path, mode)
		}
	} else {
		setMode = true
		if err := unix.Mkdir(path, mode|0o700); err != nil {
			s.warn("%s: %v", path, errno(err))
			return nil
		}
	}
	if err := s.sink(path, false); err != nil {
		return err
	}
	t.apply(path)
	if setMode {
		unix.Chmod(path, mode)
	}
	return nil
}

// sinkFile receives one file's bytes into path.
func (s *scp) sinkFile(path string, mode uint32, size int64, t times) error {
	st, statErr := os.Stat(path)
	exists := statErr == nil
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_CLOEXEC, os.FileMode(mode|0o200).Perm())
	if err != nil {
		s.warn("%s: %v", path, errno(err))
		return nil
	}
	if err := s.ack(); err != nil {
		f.Close()
		return err
	}
	var werr error
	var off int64
	for off < size {
		n := int64(len(s.buf))
		if size-off < n {
			n = size - off
		}
		got, err := io.ReadFull(s.in, s.buf[:n])
		if err != nil {
			f.Close()
			return errFatal
		}
		if werr == nil {
			if _, werr = f.Write(s.buf[:got]); werr != nil {
				// Keep reading: the stream must stay in step.
				werr = errno(werr)
			}
		}
		off += int64(got)
	}
	if werr == nil && (!exists || st.Mode().IsRegular()) {
		if err := f.Truncate(size); err != nil {
			werr = errno(err)
		}
	}
	// Made writable for the copy, it gets its own mode now (with -p, an
	// existing file too), setuid and setgid included.
	if werr == nil && (s.preserve || !exists) {
		if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
			werr = errno(err)
		}
	}
	if err := f.Close(); err != nil && werr == nil {
		werr = errno(err)
	}
	if err := s.response(); err == errFatal {
		return err
	}
	if werr == nil {
		if err := t.apply(path); err != nil {
			werr = errno(err)
		}
	}
	if werr != nil {
		s.warn("%s: %v", path, werr)
		return nil
	}
	return s.ack()
}

func parseTimes(s string) (times, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return times{}, fmt.Errorf("bad T line")
	}
	var n [4]int64
	for i, v := range f {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 0 || (i%2 == 1 && x > 999999) {
			return times{}, fmt.Errorf("bad T line")
		}
		n[i] = x
	}
	return times{set: true, mtime: time.Unix(n[0], n[1]*1000), atime: time.Unix(n[2], n[3]*1000)}, nil
}

// parseEntry parses "MMMM SIZE NAME" of a C or D line.
func parseEntry(s string) (mode uint32, size int64, name string, err error) {
	if len(s) < 5 || s[4] != ' ' {
		return 0, 0, "", fmt.Errorf("mode not delimited")
	}
	for _, c := range s[:4] {
		if c < '0' || c > '7' {
			return 0, 0, "", fmt.Errorf("bad mode")
		}
		mode = mode<<3 | uint32(c-'0')
	}
	rest := s[5:]
	sp := strings.IndexByte(rest, ' ')
	if sp <= 0 {
		return 0, 0, "", fmt.Errorf("size not delimited")
	}
	if size, err = strconv.ParseInt(rest[:sp], 10, 64); err != nil || size < 0 {
		return 0, 0, "", fmt.Errorf("size out of range")
	}
	return mode & modeMask, size, rest[sp+1:], nil
}

// source sends each path (a pattern, expanded inside the sandbox as the
// shell would have, or taken as it is when nothing matches).
func (s *scp) source(patterns []string) error {
	if err := s.response(); err != nil {
		return errFatal
	}
	for _, p := range patterns {
		matches, err := filepath.Glob(p)
		if err != nil || len(matches) == 0 {
			matches = []string{unescape(p)}
		}
		for _, m := range matches {
			if err := s.send(m); err == errFatal {
				return err
			}
		}
	}
	return nil
}

// unescape is a pattern's literal text.
func unescape(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) {
			i++
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// send sends one file, or a directory's tree under -r. Like scp.c it
// follows symlinks; here they resolve inside the sandbox's view.
func (s *scp) send(name string) error {
	if len(name) > 1 {
		name = strings.TrimRight(name, "/")
		if name == "" {
			name = "/"
		}
	}
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		s.warn("%s: %v", name, errno(err))
		return nil
	}
	defer f.Close()
	if strings.Contains(name, "\n") {
		s.warn("%s: skipping, filename contains a newline", name)
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		s.warn("%s: %v", name, errno(err))
		return nil
	}
	switch {
	case st.IsDir() && s.recursive:
		return s.sendDir(name, f, st)
	case !st.Mode().IsRegular():
		s.warn("%s: not a regular file", name)
		return nil
	}
	if err := s.sendTimes(st); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "C%04o %d %s\n", rawMode(st), st.Size(), filepath.Base(name))
	if err := s.response(); err != nil {
		return err
	}
	// Blocking reads from here: a regular file ignores O_NONBLOCK anyway.
	size, sent := st.Size(), int64(0)
	var rerr error
	for sent < size {
		n := int64(len(s.buf))
		if size-sent < n {
			n = size - sent
		}
		b := s.buf[:n]
		if rerr == nil {
			var got int
			got, rerr = io.ReadFull(f, b)
			if rerr != nil {
				// The size was promised: pad it, and say so after.
				clear(b[got:])
			}
		} else {
			clear(b)
		}
		if _, err := s.out.Write(b); err != nil {
			return errFatal
		}
		sent += n
	}
	if rerr != nil {
		s.warn("%s: %v", name, errno(rerr))
	} else if err := s.ack(); err != nil {
		return err
	}
	if err := s.response(); err == errFatal {
		return err
	}
	return nil
}

// sendDir sends D, the entries, E.
func (s *scp) sendDir(name string, f *os.File, st os.FileInfo) error {
	names, err := f.Readdirnames(-1)
	if err != nil {
		s.warn("%s: %v", name, errno(err))
		return nil
	}
	if err := s.sendTimes(st); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "D%04o 0 %s\n", rawMode(st), filepath.Base(name))
	if err := s.response(); err != nil {
		return err
	}
	for _, n := range names {
		if err := s.send(filepath.Join(name, n)); err == errFatal {
			return err
		}
	}
	fmt.Fprint(s.out, "E\n")
	if err := s.response(); err == errFatal {
		return err
	}
	return nil
}

func (s *scp) sendTimes(st os.FileInfo) error {
	if !s.preserve {
		return nil
	}
	sys := st.Sys().(*syscall.Stat_t)
	fmt.Fprintf(s.out, "T%d 0 %d 0\n", sys.Mtim.Sec, sys.Atim.Sec)
	return s.response()
}

// rawMode is the mode as stat(2) has it, masked as scp.c sends it.
func rawMode(st os.FileInfo) uint32 {
	return st.Sys().(*syscall.Stat_t).Mode & modeMask
}

// errno is the system error under a path error, as scp.c prints it: bare,
// and spelled as strerror(3) spells it ("No such file or directory"), which
// clients match (paramiko's scp module does).
func errno(err error) error {
	var e syscall.Errno
	if !errors.As(err, &e) {
		return err
	}
	msg := e.Error()
	if msg != "" && msg[0] >= 'a' && msg[0] <= 'z' {
		msg = string(msg[0]-'a'+'A') + msg[1:]
	}
	return errors.New(msg)
}
