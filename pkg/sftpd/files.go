package sftpd

import (
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Open files are served here, not by pkg/sftp: OPEN, and every request on
// the handle it answers (READ, WRITE, FSTAT, FSETSTAT, CLOSE and
// fsync@openssh.com). Their data then moves between the channel's pipes and
// the file with splice(2), never through this process's memory, where
// OpenSSH's sftp-server copies each byte through its buffers twice on the
// way in and three times on the way out, and pkg/sftp as often, with a
// goroutine handoff per request (test/bench, sftp). pkg/sftp serves
// everything else: directories, paths, links, renames, statvfs.
//
// Requests keep their order, as OpenSSH's one-loop server keeps it: one of
// ours runs only once pkg/sftp has answered every request passed to it
// before, and the request after ours reaches pkg/sftp only once ours is
// answered (replies.exclusive). So a WRITE never overtakes an earlier
// SETSTAT of the same file, and answers never interleave.

// SFTP request and answer types, open flags and status codes
// (draft-ietf-secsh-filexfer-02).
const (
	fxpInit     = 1
	fxpOpen     = 3
	fxpClose    = 4
	fxpRead     = 5
	fxpWrite    = 6
	fxpFstat    = 8
	fxpFsetstat = 10
	fxpStatus   = 101
	fxpHandle   = 102
	fxpData     = 103
	fxpAttrs    = 105

	attrACModTime = 0x8
	attrExtended  = 0x80000000

	pflagRead   = 0x1
	pflagWrite  = 0x2
	pflagCreat  = 0x8
	pflagTrunc  = 0x10
	pflagExcl   = 0x20
	fxOK        = 0
	fxEOF       = 1
	fxNoSuch    = 2
	fxDenied    = 3
	fxFailure   = 4
	fxBadPacket = 5

	fsyncExt = "fsync@openssh.com"

	// handlePrefix keeps our handles apart from pkg/sftp's, which are
	// decimal numbers.
	handlePrefix = "f"
	// maxHandle is longer than any handle of ours or pkg/sftp's: a WRITE
	// naming a longer one is passed to pkg/sftp as it is.
	maxHandle = 32
	// writeHead is a WRITE's fields before its data, past the length and
	// type: id, handle (length and bytes), offset, data length.
	writeHead = 4 + 4 + 8 + 4
)

// files is the table of open files, with the channel's descriptors where
// they are pipes (-1 otherwise, and the data is copied instead).
type files struct {
	open  map[string]int // handle → descriptor
	count uint64
	in    int    // the requests' side
	out   int    // the answers' side
	stage [2]int // a pipe a READ's data passes through on its way out
	buf   []byte // data that cannot be spliced
	// inFlight: data spliced from a file may still sit in the channel's
	// pipe, where its pages are the file's own (settle).
	inFlight bool
}

// settle waits until the channel's pipe holds none of the data spliced
// into it. Until the daemon has read it, that data is the file's page
// cache, not a copy: a WRITE, a truncation or a SETSTAT served after a
// READ would change what the READ answered, which OpenSSH's server, which
// copies, never does. The wait is the daemon's reading of at most the
// pipe (1 MiB), and only when a change follows a read.
func (f *files) settle() {
	for f.inFlight {
		n, err := unix.IoctlGetInt(f.out, unix.TIOCINQ) // FIONREAD: bytes in the pipe
		if err != nil || n == 0 {
			f.inFlight = false
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func newFiles(in, out int) *files {
	return &files{open: map[string]int{}, in: in, out: out, stage: [2]int{-1, -1}}
}

// owns reports whether a request of type typ and length may be one of
// ours; WRITE is read in place (write), the others whole.
func (f *files) owns(typ byte, length int) bool {
	switch typ {
	case fxpOpen, fxpClose, fxpRead, fxpFstat, fxpFsetstat, fxpExtended:
		return length <= maxFiltered
	}
	return false
}

// serve answers a whole request if it is ours (OPEN, or a request on one
// of our handles) and reports whether it was.
func (f *files) serve(q *requests, pkt []byte) (bool, error) {
	d := decoder{b: pkt[5:], ok: true}
	id := d.uint32()
	typ := pkt[4]
	if typ == fxpOpen {
		f.settle() // O_TRUNC
		return true, q.out.exclusive(q.passed, func(w io.Writer) error {
			return f.openFile(w, id, &d)
		})
	}
	if typ == fxpExtended && d.string() != fsyncExt {
		return false, nil
	}
	handle := d.string()
	fd, ok := f.open[handle]
	if !ok || !d.ok {
		return false, nil
	}
	return true, q.out.exclusive(q.passed, func(w io.Writer) error {
		switch typ {
		case fxpClose:
			delete(f.open, handle)
			return status(w, id, unix.Close(fd))
		case fxpRead:
			off, n := d.uint64(), d.uint32()
			if !d.ok || int64(off) < 0 {
				return statusCode(w, id, fxBadPacket, "bad message")
			}
			return f.read(w, id, fd, int64(off), int(min(n, maxIO)))
		case fxpFstat:
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return status(w, id, err)
			}
			return send(w, attrsOf(packet(fxpAttrs, id), &st))
		case fxpFsetstat:
			f.settle()
			return status(w, id, fsetstat(fd, &d))
		default: // fsync@openssh.com
			return status(w, id, unix.Fsync(fd))
		}
	})
}

// openFile opens a file as pkg/sftp's server would: the client's flags,
// and the mode it asks for (else 0644) when the file is made.
func (f *files) openFile(w io.Writer, id uint32, d *decoder) error {
	path := d.string()
	pflags := d.uint32()
	attrs := decodeAttrs(d)
	if !d.ok {
		return statusCode(w, id, fxBadPacket, "bad message")
	}
	flags := unix.O_CLOEXEC | unix.O_NOCTTY
	switch {
	case pflags&(pflagRead|pflagWrite) == pflagRead|pflagWrite:
		flags |= unix.O_RDWR
	case pflags&pflagWrite != 0:
		flags |= unix.O_WRONLY
	case pflags&pflagRead != 0:
		flags |= unix.O_RDONLY
	default:
		return status(w, id, syscall.EINVAL)
	}
	// No O_APPEND, as in pkg/sftp: the client sends every write's offset.
	if pflags&pflagCreat != 0 {
		flags |= unix.O_CREAT
	}
	if pflags&pflagTrunc != 0 {
		flags |= unix.O_TRUNC
	}
	if pflags&pflagExcl != 0 {
		flags |= unix.O_EXCL
	}
	mode := uint32(0o644)
	if attrs.flags&attrPermissions != 0 {
		mode = attrs.mode & 0o777
	}
	fd, err := unix.Open(path, flags, mode)
	if err != nil {
		return status(w, id, err)
	}
	f.count++
	handle := handlePrefix + strconv.FormatUint(f.count, 10)
	f.open[handle] = fd
	return send(w, finish(appendString(packet(fxpHandle, id), handle)))
}

// read answers a READ of up to n bytes at off: DATA, or EOF at the end.
func (f *files) read(w io.Writer, id uint32, fd int, off int64, n int) error {
	if f.out >= 0 && f.stagePipe() {
		got, err := f.spliceIn(fd, off, n)
		switch {
		case err == nil && got == 0:
			return statusCode(w, id, fxEOF, "EOF")
		case err == nil:
			if err := send(w, dataHead(id, got)); err != nil {
				return err
			}
			f.inFlight = true
			return f.spliceOut(got)
		case !errors.Is(err, unix.EINVAL):
			return status(w, id, err)
		}
		// A file that cannot be spliced (some of /proc's): copied.
	}
	if f.buf == nil {
		f.buf = make([]byte, maxIO)
	}
	got := 0
	for got < n {
		m, err := unix.Pread(fd, f.buf[got:n], off+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if got > 0 {
				break
			}
			return status(w, id, err)
		}
		if m == 0 {
			break
		}
		got += m
	}
	if got == 0 {
		return statusCode(w, id, fxEOF, "EOF")
	}
	return send(w, append(dataHead(id, got), f.buf[:got]...))
}

// stagePipe makes the pipe a READ's data passes through, and reports
// whether there is one. It holds a whole READ however the file's pages
// fall: a pipe holds a page per slot, and maxIO bytes at an unaligned
// offset span one page more than maxIO/4096. A short read, which SFTP
// allows and OpenSSH's server never makes of a regular file, is one that
// pkg/sftp's client takes for a full one and leaves a hole for.
func (f *files) stagePipe() bool {
	if f.stage[0] >= 0 {
		return true
	}
	var p [2]int
	if unix.Pipe2(p[:], unix.O_CLOEXEC) != nil {
		return false
	}
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 2*maxPacket); err != nil {
		// A smaller pipe would make short reads: copy instead.
		unix.Close(p[0])
		unix.Close(p[1])
		f.out = -1
		return false
	}
	f.stage = p
	return true
}

// spliceIn moves up to n bytes of the file at off into the stage pipe.
func (f *files) spliceIn(fd int, off int64, n int) (int, error) {
	got := 0
	for got < n {
		m, err := unix.Splice(fd, &off, f.stage[1], nil, n-got, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if got == 0 {
				return 0, err // a file that would block (a FIFO): no data, never EOF
			}
			break // the stage is full (never, at its size): a short read
		}
		if err != nil {
			if got > 0 {
				break
			}
			return 0, err
		}
		if m == 0 {
			break
		}
		got += int(m)
	}
	return got, nil
}

// spliceOut moves n bytes from the stage pipe to the channel.
func (f *files) spliceOut(n int) error {
	for n > 0 {
		m, err := unix.Splice(f.stage[0], nil, f.out, nil, n, unix.SPLICE_F_MOVE)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if err := waitFor(f.out, unix.POLLOUT); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		n -= int(m)
	}
	return nil
}

// write serves a WRITE on one of our handles in place: its data goes from
// the channel to the file, and only the few bytes read ahead of it pass
// through memory. It reports false, having read nothing, for a WRITE that
// is pkg/sftp's.
func (f *files) write(q *requests, length int) (bool, error) {
	if length < 1+writeHead {
		return false, nil // too short for a WRITE's fields: pkg/sftp's to refuse
	}
	head, err := q.r.Peek(5 + 8)
	if err != nil {
		return false, nil
	}
	hlen := int(binary.BigEndian.Uint32(head[9:]))
	if hlen > maxHandle || length < 1+writeHead+hlen {
		return false, nil
	}
	head, err = q.r.Peek(5 + writeHead + hlen)
	if err != nil {
		return false, nil
	}
	d := decoder{b: head[5:], ok: true}
	id := d.uint32()
	fd, ok := f.open[d.string()]
	if !ok {
		return false, nil
	}
	off, dlen := int64(d.uint64()), int(d.uint32())
	rest := length - (1 + writeHead + hlen) // the packet's bytes after the header
	f.settle()
	if _, err := q.r.Discard(5 + writeHead + hlen); err != nil {
		return true, err
	}
	return true, q.out.exclusive(q.passed, func(w io.Writer) error {
		if dlen != rest || off < 0 {
			if err := f.discard(q, rest); err != nil {
				return err
			}
			return statusCode(w, id, fxBadPacket, "bad message")
		}
		werr, err := f.fill(q, fd, off, dlen)
		if err != nil {
			return err
		}
		return status(w, id, werr)
	})
}

// fill writes n bytes of the channel to the file at off. werr is the
// file's error (the rest of the data is then read and dropped), err the
// channel's.
func (f *files) fill(q *requests, fd int, off int64, n int) (werr, err error) {
	// What the reader holds first.
	for n > 0 && q.r.Buffered() > 0 {
		b, _ := q.r.Peek(min(n, q.r.Buffered()))
		if werr == nil {
			werr = pwriteAll(fd, b, off)
		}
		q.r.Discard(len(b))
		off += int64(len(b))
		n -= len(b)
	}
	for n > 0 && werr == nil && f.in >= 0 {
		m, serr := unix.Splice(f.in, nil, fd, &off, n, unix.SPLICE_F_MOVE)
		switch {
		case serr == unix.EINTR:
			continue
		case serr == unix.EAGAIN:
			if err := waitFor(f.in, unix.POLLIN); err != nil {
				return nil, err
			}
			continue
		case serr == unix.EINVAL && f.in >= 0:
			f.in = -1 // a file that cannot be spliced into: copied from now on
			continue
		case serr != nil:
			werr = serr // the file's: the rest is dropped below
			continue
		case m == 0:
			return nil, io.ErrUnexpectedEOF
		}
		n -= int(m)
	}
	if werr != nil {
		return werr, f.discard(q, n)
	}
	if f.buf == nil {
		f.buf = make([]byte, maxIO)
	}
	for n > 0 {
		m, err := q.r.Read(f.buf[:min(n, len(f.buf))])
		if m > 0 && werr == nil {
			werr = pwriteAll(fd, f.buf[:m], off)
		}
		off += int64(m)
		n -= m
		if err != nil {
			return werr, err
		}
	}
	return werr, nil
}

// discard drops n bytes of the channel.
func (f *files) discard(q *requests, n int) error {
	_, err := io.CopyN(io.Discard, q.r, int64(n))
	return err
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		m, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[m:], off+int64(m)
	}
	return nil
}

// waitFor blocks until fd is ready for events, where it is non-blocking.
func waitFor(fd int, events int16) error {
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: events}}, -1)
		if err != unix.EINTR {
			return err
		}
	}
}

// fsetstat applies a FSETSTAT's attributes in OpenSSH's order: size,
// permissions, times, owner.
func fsetstat(fd int, d *decoder) error {
	a := decodeAttrs(d)
	if !d.ok {
		return syscall.EINVAL
	}
	if a.flags&attrSize != 0 {
		if err := unix.Ftruncate(fd, int64(a.size)); err != nil {
			return err
		}
	}
	if a.flags&attrPermissions != 0 {
		if err := unix.Fchmod(fd, a.mode&0o7777); err != nil {
			return err
		}
	}
	if a.flags&attrACModTime != 0 {
		tv := []unix.Timeval{{Sec: int64(a.atime)}, {Sec: int64(a.mtime)}}
		if err := unix.Futimes(fd, tv); err != nil {
			return err
		}
	}
	if a.flags&attrUIDGID != 0 {
		if err := unix.Fchown(fd, int(a.uid), int(a.gid)); err != nil {
			return err
		}
	}
	return nil
}

// attrs is an SFTP v3 ATTRS structure.
type attrs struct {
	flags, uid, gid, mode, atime, mtime uint32
	size                                uint64
}

func decodeAttrs(d *decoder) attrs {
	a := attrs{flags: d.uint32()}
	if a.flags&attrSize != 0 {
		a.size = d.uint64()
	}
	if a.flags&attrUIDGID != 0 {
		a.uid, a.gid = d.uint32(), d.uint32()
	}
	if a.flags&attrPermissions != 0 {
		a.mode = d.uint32()
	}
	if a.flags&attrACModTime != 0 {
		a.atime, a.mtime = d.uint32(), d.uint32()
	}
	if a.flags&attrExtended != 0 {
		for n := d.uint32(); n > 0 && d.ok; n-- {
			d.string()
			d.string()
		}
	}
	return a
}

// attrsOf appends a file's ATTRS, as OpenSSH's server reports them.
func attrsOf(b []byte, st *unix.Stat_t) []byte {
	b = binary.BigEndian.AppendUint32(b, attrSize|attrUIDGID|attrPermissions|attrACModTime)
	b = binary.BigEndian.AppendUint64(b, uint64(st.Size))
	b = binary.BigEndian.AppendUint32(b, st.Uid)
	b = binary.BigEndian.AppendUint32(b, st.Gid)
	b = binary.BigEndian.AppendUint32(b, st.Mode)
	b = binary.BigEndian.AppendUint32(b, uint32(st.Atim.Sec))
	b = binary.BigEndian.AppendUint32(b, uint32(st.Mtim.Sec))
	return finish(b)
}

// dataHead is a DATA answer's fields before its n bytes.
func dataHead(id uint32, n int) []byte {
	b := packet(fxpData, id)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	binary.BigEndian.PutUint32(b, uint32(len(b)-4+n))
	return b
}

// status answers with err's code, as pkg/sftp maps errors to codes.
func status(w io.Writer, id uint32, err error) error {
	if err == nil {
		return statusCode(w, id, fxOK, "Success")
	}
	code := uint32(fxFailure)
	switch {
	case errors.Is(err, unix.ENOENT):
		code = fxNoSuch
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		code = fxDenied
	}
	return statusCode(w, id, code, err.Error())
}

func statusCode(w io.Writer, id, code uint32, msg string) error {
	b := binary.BigEndian.AppendUint32(packet(fxpStatus, id), code)
	b = appendString(b, msg)
	return send(w, finish(appendString(b, "")))
}

func send(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}
