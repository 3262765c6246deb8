package entrypoint

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The entrypoint's log is bounded: past logMax bytes the file
// moves to entrypoint.log.1 (replacing the one before) and a new one starts,
// so it keeps the latest 16 to 32 MiB of the output however long it runs.
const logMax = 16 << 20

// drain bounds how long serve's end waits for the log once the
// entrypoint is gone. Only the sandbox's processes can hold the pipe, and
// they die with it, so EOF comes at once; the bound is for what cannot be.
const drain = 5 * time.Second

// logFile is the harness's copy of the entrypoint's output. Only the
// daemon writes it, from the pipe the entrypoint writes to.
type logFile struct {
	path string
	max  int64 // logMax; tests make it smaller
	f    *os.File
	size int64
	lost int64 // bytes read that could not be written (a full disk)
}

func openLog(dir string) (*logFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("entrypoint: create the log dir: %w", err)
	}
	l := &logFile{path: filepath.Join(dir, "entrypoint.log"), max: logMax}
	if err := l.open(); err != nil {
		return nil, fmt.Errorf("entrypoint: open its log: %w", err)
	}
	return l, nil
}

func (l *logFile) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// copy writes everything read from r to the log until EOF (or r's read
// deadline). It never stops reading before then, whatever the file does, so
// the entrypoint never blocks on a full pipe: a chunk that cannot be written
// is counted, and the count is written at the end.
func (l *logFile) copy(r io.Reader, log *slog.Logger) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			l.write(buf[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				log.Warn("entrypoint log: stopped reading before EOF", "err", err)
			}
			break
		}
	}
	if l.lost > 0 {
		log.Warn("entrypoint log: output lost", "bytes", l.lost)
		l.write([]byte(fmt.Sprintf("\n[sandboxd: %d bytes of the entrypoint's output could not be written to this log]\n", l.lost)))
	}
	l.close()
}

func (l *logFile) write(p []byte) {
	if l.f != nil && l.size > 0 && l.size+int64(len(p)) > l.max {
		l.f.Close()
		l.f = nil
		if err := os.Rename(l.path, l.path+".1"); err == nil {
			l.open()
		}
	}
	if l.f == nil {
		l.lost += int64(len(p))
		return
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	if err != nil {
		l.lost += int64(len(p) - n)
	}
}

func (l *logFile) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// growPipe gives the entrypoint's end of the pipe 1 MiB, where the system
// allows it, so that a burst of output waits in the pipe and not in the
// entrypoint. Fd leaves the descriptor blocking, as the entrypoint's
// stdout must be.
func growPipe(w *os.File) {
	unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 1<<20)
}
