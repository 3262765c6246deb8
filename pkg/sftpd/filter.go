package sftpd

import (
	"bufio"
	"encoding/binary"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// The stream between the client and pkg/sftp's server passes through here,
// for two things OpenSSH's sftp-server does and pkg/sftp does not:
//
//   - limits@openssh.com: the server says it takes reads and writes of
//     maxIO bytes, and OpenSSH's client (8.7 and later) then moves 255 KiB
//     per request instead of 32 KiB;
//   - MKDIR with a mode: the directory is made with the mode the client
//     asks for (less the umask; 0777 when it asks for none), where pkg/sftp
//     always uses 0755, so `scp -r` keeps a private directory private.
//
// Every other packet passes through as it is, without a copy of its own.

// SFTP packet types and attribute flags (draft-ietf-secsh-filexfer-02).
const (
	fxpVersion       = 2
	fxpSetstat       = 9
	fxpMkdir         = 14
	fxpExtended      = 200
	fxpExtendedReply = 201

	attrSize        = 0x1
	attrUIDGID      = 0x2
	attrPermissions = 0x4

	// maxPacket is the longest packet pkg/sftp's server reads (its
	// maxMsgLength), and maxIO what fits in it with a packet's own fields,
	// as OpenSSH's server reckons it.
	maxPacket = 256 << 10
	maxIO     = maxPacket - 1024
	// maxFiltered bounds the packets read whole here: MKDIR and the
	// extended requests are a path or two long.
	maxFiltered = 64 << 10

	limitsExt = "limits@openssh.com"
)

// requests is the client's side, read by pkg/sftp's server.
type requests struct {
	r       *bufio.Reader
	out     *replies
	files   *files // open files, served here (files.go); nil: all pkg/sftp's
	left    int    // bytes of the current packet still to pass as they are
	pending []byte // a whole packet, as read or rewritten, to pass first
	passed  int    // requests passed to pkg/sftp, each answered with one packet
	inited  bool   // INIT has been passed: pkg/sftp answers nothing before it
}

func (q *requests) Read(p []byte) (int, error) {
	for {
		if len(q.pending) > 0 {
			n := copy(p, q.pending)
			q.pending = q.pending[n:]
			return n, nil
		}
		if q.left > 0 {
			n, err := q.r.Read(p[:min(len(p), q.left)])
			q.left -= n
			return n, err
		}
		head, err := q.r.Peek(5)
		if err != nil {
			// A short packet at the end: pkg/sftp says what it makes of it.
			if n, _ := q.r.Read(p); n > 0 {
				return n, nil
			}
			return 0, err
		}
		length, typ := int(binary.BigEndian.Uint32(head)), head[4]
		if length < 5 {
			// Too short for a type and an id: nothing here reads it, and
			// pkg/sftp says what it makes of it.
			q.pass(0)
			q.left = 4 + length
			continue
		}
		ours := q.files != nil && q.inited
		if ours && typ == fxpWrite {
			if done, err := q.files.write(q, length); done || err != nil {
				if err != nil {
					return 0, err
				}
				continue
			}
		}
		if q.files != nil && typ == fxpSetstat {
			q.files.settle() // a truncation by path, after a spliced READ
		}
		// Read whole: a request that may be one of ours (files.go), or one
		// the filter answers or rewrites; every other packet passes as it is.
		whole := ours && q.files.owns(typ, length)
		if !whole && ((typ != fxpMkdir && typ != fxpExtended) || length > maxFiltered) {
			q.pass(typ)
			q.left = 4 + length
			continue
		}
		pkt := make([]byte, 4+length)
		if _, err := io.ReadFull(q.r, pkt); err != nil {
			return 0, err
		}
		if whole {
			done, err := q.files.serve(q, pkt)
			if err != nil {
				return 0, err
			}
			if done {
				continue
			}
		}
		if q.pending = q.filter(pkt); q.pending != nil {
			q.pass(typ)
		}
	}
}

// pass counts a request that pkg/sftp will answer, each with one packet
// (INIT with VERSION, whenever it comes); requests of ours are served only
// once an INIT has been passed.
func (q *requests) pass(typ byte) {
	q.inited = q.inited || typ == fxpInit
	q.passed++
}

// filter answers or rewrites one whole request; nil means it was answered.
func (q *requests) filter(pkt []byte) []byte {
	d := decoder{b: pkt[5:], ok: true}
	id := d.uint32()
	switch pkt[4] {
	case fxpExtended:
		if d.string() == limitsExt && d.ok {
			q.out.inject(limitsReply(id))
			return nil
		}
	case fxpMkdir:
		path := d.string()
		flags := d.uint32()
		mode := uint32(0o777)
		if flags&attrSize != 0 {
			d.skip(8)
		}
		if flags&attrUIDGID != 0 {
			d.skip(8)
		}
		if flags&attrPermissions != 0 {
			mode = d.uint32() & 0o7777
		}
		if !d.ok || unix.Mkdir(path, mode) != nil {
			// pkg/sftp tries again and reports the error as it reports
			// every other, in the order of the requests.
			return pkt
		}
		// Made: a SETSTAT of nothing gets pkg/sftp to answer "ok" in its
		// turn, after every earlier request's answer.
		return setstatNothing(id, path)
	}
	return pkt
}

// replies is pkg/sftp's side, written to the client. It follows packet
// boundaries, so that an answer of ours goes between two packets.
type replies struct {
	mu       sync.Mutex
	changed  *sync.Cond // a packet ended, or the stream failed
	w        io.Writer
	answered int    // pkg/sftp's packets written whole, VERSION included
	left     int    // bytes of the current packet still to come
	head     []byte // a packet's length while it is incomplete
	version  []byte // the first packet (VERSION) until it is whole; nil once sent
	queued   []byte // answers of ours waiting for a boundary
	err      error
}

func newReplies(w io.Writer) *replies {
	return &replies{w: w, version: []byte{}}
}

func (r *replies) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Whatever this write did (a packet ended, VERSION went out, the
	// stream failed), a waiter in exclusive looks again.
	defer func() {
		if r.changed != nil {
			r.changed.Broadcast()
		}
	}()
	if r.err != nil {
		return 0, r.err
	}
	n := len(p)
	if r.version != nil {
		// The VERSION packet is small: take it whole and add our extension.
		r.version = append(r.version, p...)
		if len(r.version) < 4 || len(r.version) < 4+int(binary.BigEndian.Uint32(r.version)) {
			return n, nil
		}
		whole := 4 + int(binary.BigEndian.Uint32(r.version))
		rest := r.version[whole:]
		v := r.version[:whole]
		if v[4] == fxpVersion {
			v = withOurExtensions(v)
		}
		r.version = nil
		if _, r.err = r.w.Write(v); r.err != nil {
			return 0, r.err
		}
		r.answered++ // INIT's answer: pass counts INIT too
		p = rest
	}
	if len(p) == 0 {
		return n, nil
	}
	if _, r.err = r.w.Write(p); r.err != nil {
		return 0, r.err
	}
	r.track(p)
	r.flush()
	return n, nil
}

// exclusive runs fn, which answers one request of ours on w, once
// pkg/sftp has answered the passed requests before it: then the stream is
// between packets and stays ours until fn returns, as pkg/sftp has nothing
// left to answer and gets the next request only after this one.
func (r *replies) exclusive(passed int, fn func(w io.Writer) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = sync.NewCond(&r.mu)
	}
	for r.err == nil && (r.answered < passed || r.version != nil || r.left != 0 || len(r.head) != 0) {
		r.changed.Wait()
	}
	if r.err != nil {
		return r.err
	}
	r.flush()
	if r.err == nil {
		r.err = fn(r.w)
	}
	return r.err
}

// track follows the packets in p, which has been written.
func (r *replies) track(p []byte) {
	for len(p) > 0 {
		if r.left == 0 {
			take := min(4-len(r.head), len(p))
			r.head = append(r.head, p[:take]...)
			p = p[take:]
			if len(r.head) == 4 {
				r.left = int(binary.BigEndian.Uint32(r.head))
				r.head = r.head[:0]
				if r.left == 0 {
					r.answered++
				}
			}
			continue
		}
		take := min(r.left, len(p))
		r.left -= take
		p = p[take:]
		if r.left == 0 {
			r.answered++
		}
	}
}

// flush writes our answers if the stream is between packets.
func (r *replies) flush() {
	if len(r.queued) == 0 || r.left != 0 || len(r.head) != 0 || r.version != nil || r.err != nil {
		return
	}
	_, r.err = r.w.Write(r.queued)
	r.queued = nil
}

// inject sends a packet of ours between two of pkg/sftp's.
func (r *replies) inject(pkt []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queued = append(r.queued, pkt...)
	r.flush()
}

func (r *replies) Close() error {
	if c, ok := r.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// limitsReply is OpenSSH's answer to limits@openssh.com: the longest
// packet, read and write, and how many handles may be open.
func limitsReply(id uint32) []byte {
	var nofile unix.Rlimit
	handles := uint64(0)
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile) == nil && nofile.Cur > 64 {
		handles = nofile.Cur - 64 // room for the server's own descriptors
	}
	b := packet(fxpExtendedReply, id)
	for _, v := range []uint64{maxPacket, maxIO, maxIO, handles} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return finish(b)
}

// setstatNothing is a SETSTAT of path that changes no attribute.
func setstatNothing(id uint32, path string) []byte {
	b := packet(fxpSetstat, id)
	b = appendString(b, path)
	b = binary.BigEndian.AppendUint32(b, 0)
	return finish(b)
}

// withOurExtensions adds the extensions served in front of pkg/sftp to a
// VERSION packet: limits (here) and fsync on an open file (files.go).
func withOurExtensions(v []byte) []byte {
	return withExtension(withExtension(v, limitsExt, "1"), fsyncExt, "1")
}

// withExtension adds a name/data pair to a VERSION packet.
func withExtension(v []byte, name, data string) []byte {
	b := append([]byte(nil), v...)
	b = appendString(b, name)
	b = appendString(b, data)
	return finish(b)
}

func packet(typ byte, id uint32) []byte {
	b := make([]byte, 4, 64)
	b = append(b, typ)
	return binary.BigEndian.AppendUint32(b, id)
}

// finish writes the packet's length into its first four bytes.
func finish(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// decoder reads SSH wire types; ok turns false at the first short read.
type decoder struct {
	b  []byte
	ok bool
}

func (d *decoder) skip(n int) {
	if !d.ok || len(d.b) < n {
		d.ok, d.b = false, nil
		return
	}
	d.b = d.b[n:]
}

func (d *decoder) uint32() uint32 {
	if !d.ok || len(d.b) < 4 {
		d.ok = false
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) uint64() uint64 {
	hi, lo := d.uint32(), d.uint32()
	return uint64(hi)<<32 | uint64(lo)
}

func (d *decoder) string() string {
	n := d.uint32()
	if !d.ok || uint64(len(d.b)) < uint64(n) {
		d.ok = false
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
