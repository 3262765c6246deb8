package sftpd

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// served runs the file server over two pipes (as the session's channel
// reaches it) or, with pipes false, over in-memory streams that cannot be
// spliced, in a fresh working directory, and returns its client's side.
func served(t *testing.T, pipes bool) (dir string, toServer io.WriteCloser, fromServer io.Reader, done <-chan int) {
	t.Helper()
	dir = t.TempDir()
	t.Chdir(dir)
	var in io.Reader
	var out io.WriteCloser
	if pipes {
		reqR, reqW, err := os.Pipe()
		require.NoError(t, err)
		respR, respW, err := os.Pipe()
		require.NoError(t, err)
		t.Cleanup(func() { reqR.Close(); reqW.Close(); respR.Close(); respW.Close() })
		in, out, toServer, fromServer = reqR, respW, reqW, respR
	} else {
		reqR, reqW := io.Pipe()
		respR, respW := io.Pipe()
		t.Cleanup(func() { reqW.Close(); respR.Close() })
		in, out, toServer, fromServer = reqR, respW, reqW, respR
	}
	ch := make(chan int, 1)
	go func() {
		code := serveSFTP(in, out)
		out.Close() // as the role's exit closes it
		ch <- code
	}()
	return dir, toServer, fromServer, ch
}

// client is pkg/sftp's client on the served server, moving maxIO bytes per
// request with 64 requests in flight, as OpenSSH's client does.
func client(t *testing.T, pipes bool) (string, *sftp.Client) {
	t.Helper()
	dir, w, r, _ := served(t, pipes)
	c, err := sftp.NewClientPipe(r, w, sftp.MaxPacketUnchecked(maxIO), sftp.MaxConcurrentRequestsPerFile(64),
		sftp.UseConcurrentReads(true), sftp.UseConcurrentWrites(true))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return dir, c
}

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// TestFilesMoveWholeBothWays: a file put and got with many requests in
// flight arrives byte for byte, through splice over pipes and through the
// copy where the channel is not a pipe.
func TestFilesMoveWholeBothWays(t *testing.T) {
	for _, pipes := range []bool{true, false} {
		name := map[bool]string{true: "pipes, spliced", false: "streams, copied"}[pipes]
		t.Run(name, func(t *testing.T) {
			dir, c := client(t, pipes)
			src := make([]byte, 37<<20+12345) // not a multiple of any request
			_, err := rand.Read(src)
			require.NoError(t, err)

			f, err := c.Create("up.bin")
			require.NoError(t, err)
			_, err = f.ReadFrom(bytes.NewReader(src))
			require.NoError(t, err)
			require.NoError(t, f.Close())
			assert.Equal(t, sha256.Sum256(src), digest(t, filepath.Join(dir, "up.bin")), "uploaded whole")

			f, err = c.Open("up.bin")
			require.NoError(t, err)
			var back bytes.Buffer
			_, err = f.WriteTo(&back)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			assert.Equal(t, sha256.Sum256(src), sha256.Sum256(back.Bytes()), "downloaded whole")

			// A read past the end is EOF; a read across it is short.
			f, err = c.Open("up.bin")
			require.NoError(t, err)
			buf := make([]byte, 100)
			_, err = f.ReadAt(buf, int64(len(src)))
			assert.ErrorIs(t, err, io.EOF)
			n, err := f.ReadAt(buf, int64(len(src)-10))
			assert.Equal(t, 10, n)
			assert.ErrorIs(t, err, io.EOF)
			assert.Equal(t, src[len(src)-10:], buf[:10])
			require.NoError(t, f.Close())
		})
	}
}

// TestOpenFilesBehaveAsPkgSftps: flags, modes, attributes on a handle and
// errors are what pkg/sftp's own server gives.
func TestOpenFilesBehaveAsPkgSftps(t *testing.T) {
	dir, c := client(t, true)
	old := unix.Umask(0o022)
	defer unix.Umask(old)

	f, err := c.OpenFile("made", os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	require.NoError(t, err)
	_, err = f.Write([]byte("hello world"))
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(11), st.Size(), "FSTAT on the handle")
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "made 0644 when no mode is asked for")

	require.NoError(t, f.Chmod(0o600))
	require.NoError(t, f.Truncate(5))
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, c.Chtimes("made", when, when)) // a path: pkg/sftp's
	require.NoError(t, f.Chown(os.Getuid(), os.Getgid()))
	require.NoError(t, f.Sync(), "fsync@openssh.com on our handle")
	require.NoError(t, f.Close())
	local, err := os.Stat(filepath.Join(dir, "made"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), local.Mode().Perm(), "FSETSTAT permissions")
	assert.Equal(t, int64(5), local.Size(), "FSETSTAT size")
	assert.True(t, local.ModTime().Equal(when), "SETSTAT after FSETSTAT, in order")

	_, err = c.OpenFile("made", os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	assert.Error(t, err, "O_EXCL on a file that exists")
	_, err = c.Open("absent")
	assert.ErrorIs(t, err, os.ErrNotExist, "NO_SUCH_FILE")
	// Directories stay pkg/sftp's, and a handle of theirs is passed to them.
	require.NoError(t, c.Mkdir("sub"))
	entries, err := c.ReadDir(".")
	require.NoError(t, err)
	assert.Len(t, entries, 2)
}

// raw speaks SFTP by packets, to pipeline requests as a client may.
type raw struct {
	t *testing.T
	w io.Writer
	r io.Reader
}

func (c raw) send(typ byte, id uint32, fields ...[]byte) {
	b := packet(typ, id)
	for _, f := range fields {
		b = append(b, f...)
	}
	_, err := c.w.Write(finish(b))
	require.NoError(c.t, err)
}

func (c raw) recv() (typ byte, id uint32, body []byte) {
	var head [4]byte
	_, err := io.ReadFull(c.r, head[:])
	require.NoError(c.t, err)
	b := make([]byte, binary.BigEndian.Uint32(head[:]))
	_, err = io.ReadFull(c.r, b)
	require.NoError(c.t, err)
	if b[0] == fxpVersion {
		return b[0], 0, b[1:]
	}
	return b[0], binary.BigEndian.Uint32(b[1:]), b[5:]
}

func str(s string) []byte { return appendString(nil, s) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// TestRequestsAreAnsweredInTheirOrder: requests sent without waiting, some
// pkg/sftp's and some ours, take effect and are answered in the order sent,
// as OpenSSH's server answers them.
func TestRequestsAreAnsweredInTheirOrder(t *testing.T) {
	dir, w, r, done := served(t, true)
	c := raw{t, w, r}
	c.w.Write(finish(append([]byte{0, 0, 0, 0, fxpInit}, u32(3)...)))
	typ, _, _ := c.recv()
	require.Equal(t, byte(fxpVersion), typ)

	c.send(fxpOpen, 1, str("f"), u32(pflagWrite|pflagCreat), u32(0))
	typ, id, body := c.recv()
	require.Equal(t, byte(fxpHandle), typ)
	require.Equal(t, uint32(1), id)
	handle := body[4:]

	// SETSTAT (pkg/sftp) truncating to 0, then a WRITE (ours) at 0, then a
	// STAT (pkg/sftp), all at once: the write lands after the truncation,
	// and the stat sees it.
	c.send(fxpWrite, 2, str(string(handle)), u64(0), str("0123456789"))
	c.send(fxpSetstat, 3, str("f"), u32(attrSize), u64(0))
	c.send(fxpWrite, 4, str(string(handle)), u64(0), str("abc"))
	c.send(17, 5, str("f")) // STAT
	c.send(fxpClose, 6, str(string(handle)))
	for want := uint32(2); want <= 6; want++ {
		typ, id, body := c.recv()
		require.Equal(t, want, id, "answers in the order of the requests")
		if want == 5 {
			require.Equal(t, byte(fxpAttrs), typ)
			assert.Equal(t, uint64(3), binary.BigEndian.Uint64(body[4:]), "the STAT after the WRITE sees it")
			continue
		}
		require.Equal(t, byte(fxpStatus), typ)
		assert.Equal(t, uint32(fxOK), binary.BigEndian.Uint32(body), "request %d", want)
	}
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "abc", string(got))

	// A WRITE whose data length disagrees with its packet is a bad
	// message; the stream goes on.
	// A handle closed is no longer ours: pkg/sftp reports it unknown.
	c.send(fxpRead, 10, str(string(handle)), u64(0), u32(10))
	typ, id, body = c.recv()
	assert.Equal(t, []any{byte(fxpStatus), uint32(10)}, []any{typ, id})
	assert.NotEqual(t, uint32(fxOK), binary.BigEndian.Uint32(body), "a closed handle")

	c.send(fxpOpen, 7, str("g"), u32(pflagRead|pflagWrite|pflagCreat), u32(0))
	_, _, body = c.recv()
	g := string(body[4:])
	c.send(fxpWrite, 8, str(g), u64(0), u32(100), []byte("short"))
	typ, id, body = c.recv()
	assert.Equal(t, []any{byte(fxpStatus), uint32(8), uint32(fxBadPacket)}, []any{typ, id, binary.BigEndian.Uint32(body)})
	c.send(fxpRead, 9, str(g), u64(0), u32(10))
	typ, id, body = c.recv()
	assert.Equal(t, []any{byte(fxpStatus), uint32(9), uint32(fxEOF)}, []any{typ, id, binary.BigEndian.Uint32(body)}, "nothing was written")

	// A WRITE the file refuses (opened for reading) past what the reader
	// holds ahead: the error is answered, the rest of its data dropped,
	// and the next request is read where it begins.
	c.send(fxpOpen, 11, str("g"), u32(pflagRead), u32(0))
	_, _, body = c.recv()
	ro := string(body[4:])
	// The header alone first, so that none of the data is read ahead
	// with it and all of it meets the file through splice.
	data := bytes.Repeat([]byte("x"), 64<<10)
	write := finish(append(append(append(appendString(packet(fxpWrite, 12), ro), u64(0)...), u32(uint32(len(data)))...), data...))
	head := len(write) - len(data)
	_, err = w.Write(write[:head])
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = w.Write(write[head:])
	require.NoError(t, err)
	typ, id, body = c.recv()
	assert.Equal(t, []any{byte(fxpStatus), uint32(12)}, []any{typ, id})
	assert.NotEqual(t, uint32(fxOK), binary.BigEndian.Uint32(body), "a read-only file")
	c.send(fxpFstat, 13, str(ro))
	typ, id, _ = c.recv()
	assert.Equal(t, []any{byte(fxpAttrs), uint32(13)}, []any{typ, id}, "the stream is whole after it")

	// A packet too short for an id is pkg/sftp's to refuse: the server
	// ends with its error (a panic here would end the test binary).
	w.Write([]byte{0, 0, 0, 0, fxpMkdir, 0, 0, 0})
	w.Close()
	assert.Equal(t, 1, <-done, "pkg/sftp's error for the short packet")
}

// TestAReadAnswersWhatTheFileHeldThen: a READ's data, spliced, is the
// file's page cache until the daemon reads it from the pipe; a WRITE of the
// same bytes sent right after it must not change what the READ answers.
func TestAReadAnswersWhatTheFileHeldThen(t *testing.T) {
	dir, w, r, _ := served(t, true)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("old-old-old"), 0o644))
	c := raw{t, w, r}
	c.w.Write(finish(append([]byte{0, 0, 0, 0, fxpInit}, u32(3)...)))
	c.recv()
	c.send(fxpOpen, 1, str("f"), u32(pflagRead|pflagWrite), u32(0))
	_, _, body := c.recv()
	h := string(body[4:])

	for round := range 20 {
		old := fmt.Sprintf("old-%07d", round)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte(old), 0o644))
		// Both sent before either answer is read: the READ's data waits in
		// the pipe while the WRITE arrives.
		c.send(fxpRead, 2, str(h), u64(0), u32(11))
		c.send(fxpWrite, 3, str(h), u64(0), str("NEW-NEW-NEW"))
		typ, id, body := c.recv()
		require.Equal(t, []any{byte(fxpData), uint32(2)}, []any{typ, id})
		assert.Equal(t, old, string(body[4:]), "round %d: the READ answers what the file held when it was read", round)
		typ, id, body = c.recv()
		require.Equal(t, []any{byte(fxpStatus), uint32(3), uint32(fxOK)}, []any{typ, id, binary.BigEndian.Uint32(body)})
	}
}
