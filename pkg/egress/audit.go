package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Audit records every egress decision as JSON lines in <dir>/egress.log,
// rotated to egress.log.1 … egress.log.N so that a chatty sandbox cannot fill
// the disk. The zero of *Audit (nil) records nothing.
type Audit struct {
	log *slog.Logger
	f   *rotatingFile
}

// Default bounds for OpenAudit: 8 MiB per file, 4 old files kept.
const (
	DefaultAuditBytes = 8 << 20
	DefaultAuditKeep  = 4
)

// OpenAudit opens (appends to) the audit log in dir; maxBytes and keep bound
// each file's size and the number of rotated files (0 takes the defaults).
func OpenAudit(dir string, maxBytes int64, keep int) (*Audit, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultAuditBytes
	}
	if keep <= 0 {
		keep = DefaultAuditKeep
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create audit dir %s: %w", dir, err)
	}
	f := &rotatingFile{path: filepath.Join(dir, "egress.log"), max: maxBytes, keep: keep}
	if err := f.open(); err != nil {
		return nil, err
	}
	return &Audit{log: slog.New(slog.NewJSONHandler(f, nil)), f: f}, nil
}

// Close closes the current file.
func (a *Audit) Close() error {
	if a == nil {
		return nil
	}
	return a.f.close()
}

// event is one audit record; its fields are the log's schema.
type event struct {
	kind    string // "decision" or "close"
	label   string // whose proxy: "agent", "verifier", …
	client  string
	method  string
	host    string
	port    uint16
	addr    netip.AddrPort
	verdict string // "allow", "deny", "error"
	reason  string
	status  int
	up      int64 // bytes client → upstream
	down    int64 // bytes upstream → client
	elapsed time.Duration
}

func (a *Audit) record(e event) {
	if a == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("proxy", e.label),
		slog.String("client", e.client),
		slog.String("method", e.method),
		slog.String("host", e.host),
		slog.Int("port", int(e.port)),
	}
	if e.addr.IsValid() {
		attrs = append(attrs, slog.String("addr", e.addr.String()))
	}
	if e.kind == "decision" {
		attrs = append(attrs, slog.String("verdict", e.verdict), slog.String("reason", e.reason))
	} else {
		attrs = append(attrs, slog.Int("status", e.status), slog.Int64("bytes_up", e.up),
			slog.Int64("bytes_down", e.down), slog.Duration("duration", e.elapsed))
		if e.reason != "" {
			attrs = append(attrs, slog.String("reason", e.reason))
		}
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, e.kind, attrs...)
}

// rotatingFile is an io.Writer that starts a new file before a write would
// take the current one past max bytes. slog's JSON handler writes each record
// with one Write, so records never straddle two files.
type rotatingFile struct {
	path string
	max  int64
	keep int

	mu   sync.Mutex
	f    *os.File
	size int64
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat audit log: %w", err)
	}
	r.f, r.size = f, st.Size()
	return nil
}

func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, errors.New("write audit log: closed")
	}
	if r.size > 0 && r.size+int64(len(p)) > r.max {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate shifts egress.log.i to .i+1, dropping the oldest, and reopens.
func (r *rotatingFile) rotate() error {
	r.f.Close()
	r.f = nil
	for i := r.keep - 1; i >= 1; i-- {
		err := os.Rename(fmt.Sprintf("%s.%d", r.path, i), fmt.Sprintf("%s.%d", r.path, i+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate audit log: %w", err)
		}
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	return r.open()
}

func (r *rotatingFile) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
