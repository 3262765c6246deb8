// Package sshd is sandboxd's SSH door: agents log in with their key and land
// in the sandbox as the task's agent user, with a real terminal, files
// (sftp, scp) and ports (ssh -L); the harness logs in with its own key and
// may run only sandboxd's control commands, in the substrate.
//
// It is built on golang.org/x/crypto/ssh; every command it runs in the
// sandbox goes through pkg/ptyrelay and pkg/join, so nothing here decides
// what a session can see. What this package decides is the protocol: which
// requests are honoured, in which order replies and statuses go out
// (exit-status before EOF and close:
// docs/failures.md#exit-status-before-eof-and-close), and when a session's
// processes are ended:
//
//   - the command exits: its background processes live on
//     (docs/failures.md#background-processes-outlive-their-command);
//   - the client disconnects (or closes the channel) first: the session's
//     process group gets SIGHUP, then SIGKILL after HangupGrace. Processes
//     that left the group (setsid, a shell's background jobs under job
//     control) survive, as they do under sshd;
//   - SessionTimeout elapses: the whole tree is frozen and killed, the output
//     printed so far is delivered, and the client gets exit-status 124 and a
//     line on stderr saying why
//     (docs/failures.md#output-streams-and-survives-a-timeout,
//     docs/failures.md#timeout-kills-the-whole-tree).
//
// Choices that differ from OpenSSH's sshd, on purpose:
//
//   - The login name of an agent key is ignored: `ssh root@` and `ssh
//     agent@` run as the same agent user.
//   - No SSH_CONNECTION, SSH_CLIENT or SSH_TTY: they would tell the agent the
//     harness's addresses. The environment is the daemon's plus TERM and the
//     env requests that pass the allowlist (LANG, LC_*, TERM, AcceptEnv).
//   - Sessions start in the agent's working directory, not in $HOME, for
//     exec, shell and sftp alike (`scp f host:` lands in the workdir).
//   - sftp, and the legacy scp server (an exec of `scp -t` or `scp -f`
//     without a pty), are sandboxd's own (pkg/sftpd), joined as the agent
//     user like any session, whatever the image has: no image needs
//     OpenSSH's sftp-server or scp, and no program the agent may have
//     rewritten handles the harness's files.
//   - tcpip-forward (ssh -R) is refused: nothing in the sandbox may listen
//     on the substrate's network.
//   - A pty session ignores the client's EOF, as sshd does; a pipe session
//     passes it on (docs/failures.md#stdin-eof-reaches-the-command).
package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// Agent is who agent sessions run as, and with what; the daemon builds it
// from the task and the image, and may change it between phases.
type Agent struct {
	User idmap.User
	Env  []string // the whole environment, before TERM and env requests
	Dir  string   // working directory inside the sandbox
}

// HarnessFunc runs one of sandboxd's control commands for a harness key, in
// the substrate, and returns its exit code. It must refuse anything that is
// not a control command; it never gets a shell.
type HarnessFunc func(ctx context.Context, command string, stdout, stderr io.Writer) int

// Config is what the daemon hands the SSH server.
type Config struct {
	// Target is the sandbox; New reads its /etc/hosts once, for the names
	// that ssh -L may forward to.
	Target join.Target
	// Agent is asked at the start of each agent session; an error refuses
	// the session with its text (the sandbox is stopping, say).
	Agent   func() (Agent, error)
	HostKey ssh.Signer
	// AgentKeys and HarnessKeys are the accepted identities; a key may be in
	// only one of them.
	AgentKeys   []AuthorizedKey
	HarnessKeys []AuthorizedKey
	// AcceptEnv are extra patterns (path.Match syntax, like sshd's AcceptEnv)
	// of env request names to accept beyond LANG, LC_* and TERM.
	AcceptEnv []string
	// RecordsDir receives sessions.jsonl and one .cast per pty session; it
	// must be outside the sandbox's view. Empty disables recording.
	RecordsDir string
	// SessionTimeout bounds every agent session; 0 means none.
	SessionTimeout time.Duration
	Harness        HarnessFunc
	// Gone says why every session is ending ("" while the sandbox lives);
	// a session that ends while it says something tells its client.
	Gone func() string
	Log  *slog.Logger

	// Limits; zero means the default.
	MaxSessionsPerConn int           // concurrent session channels per connection (64)
	MaxForwardsPerConn int           // concurrent direct-tcpip channels per connection (256)
	MaxHandshakes      int           // connections in handshake at once; more wait to be accepted (128)
	HandshakeTimeout   time.Duration // from accept to authenticated (30s)
	HangupGrace        time.Duration // SIGHUP to SIGKILL after a disconnect (2s)
}

// Limits on what a client may ask for.
const (
	defaultMaxSessions   = 64
	defaultMaxForwards   = 256
	defaultMaxHandshakes = 128
	maxEnvVars           = 256
	maxEnvBytes          = 256 << 10
)

// serverVersion is the SSH banner.
const serverVersion = "SSH-2.0-sandboxd SFTP-as-OpenSSH"

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("sshd: server closed")

// Server serves SSH connections; one Server may serve several listeners.
type Server struct {
	cfg       Config
	log       *slog.Logger
	sshConfig *ssh.ServerConfig
	keys      map[string]*identity // by marshaled public key
	keysMu    sync.RWMutex         // keys grow while serving (AuthorizeAgentKeys)
	rec       *recorder
	leftovers ptyrelay.Leftovers
	handshake chan struct{} // semaphore of connections in handshake
	// hosts are the names ssh -L may use, read from the sandbox's
	// /etc/hosts by New: before any agent session, so later rewrites (or a
	// FIFO in its place) change nothing.
	hosts map[string][]netip.Addr

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	pending   map[net.Conn]struct{} // accepted, not yet authenticated
	sessions  map[*session]struct{}
	closing   bool
	closed    chan struct{} // closed when closing starts
	idle      chan struct{} // closed and replaced when sessions drop to zero
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// identity is an authenticated key and its role.
type identity struct {
	key     AuthorizedKey
	harness bool
}

const permIdentity = "sandboxd.identity"

// New checks cfg and prepares a server.
func New(cfg Config) (*Server, error) {
	if cfg.HostKey == nil {
		return nil, errors.New("sshd: a host key is required (LoadOrCreateHostKey)")
	}
	if cfg.Agent == nil && len(cfg.AgentKeys) > 0 {
		return nil, errors.New("sshd: agent keys given without Config.Agent")
	}
	if cfg.Harness == nil && len(cfg.HarnessKeys) > 0 {
		return nil, errors.New("sshd: harness keys given without Config.Harness")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxSessionsPerConn <= 0 {
		cfg.MaxSessionsPerConn = defaultMaxSessions
	}
	if cfg.MaxForwardsPerConn <= 0 {
		cfg.MaxForwardsPerConn = defaultMaxForwards
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = defaultMaxHandshakes
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	if cfg.HangupGrace <= 0 {
		cfg.HangupGrace = 2 * time.Second
	}
	s := &Server{
		cfg: cfg, log: cfg.Log,
		keys:      map[string]*identity{},
		handshake: make(chan struct{}, cfg.MaxHandshakes),
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		pending:   map[net.Conn]struct{}{},
		sessions:  map[*session]struct{}{},
		closed:    make(chan struct{}),
		idle:      make(chan struct{}),
	}
	for _, k := range cfg.AgentKeys {
		s.keys[string(k.Key.Marshal())] = &identity{key: k}
	}
	for _, k := range cfg.HarnessKeys {
		if _, dup := s.keys[string(k.Key.Marshal())]; dup {
			return nil, fmt.Errorf("sshd: key %s is both an agent and a harness key; a harness key must never get a shell", k.Fingerprint())
		}
		s.keys[string(k.Key.Marshal())] = &identity{key: k, harness: true}
	}
	var err error
	if s.rec, err = newRecorder(cfg.RecordsDir); err != nil {
		return nil, err
	}
	s.sshConfig = &ssh.ServerConfig{
		PublicKeyCallback: s.authenticate,
		// "OpenSSH" in the comment tells clients that tell servers apart by
		// it (asyncssh) that SFTP's SYMLINK takes its arguments in
		// OpenSSH's order, as pkg/sftp does; OpenSSH's own quirk patterns
		// match from the start and never match this
		// (docs/failures.md#sftp-symlinks-point-the-right-way).
		ServerVersion: serverVersion,
		AuthLogCallback: func(md ssh.ConnMetadata, method string, err error) {
			if err != nil && method == "publickey" && !errors.Is(err, ssh.ErrNoAuth) {
				s.log.Debug("ssh auth refused", "remote", md.RemoteAddr().String(), "user", md.User(), "err", err)
			}
		},
	}
	s.sshConfig.AddHostKey(cfg.HostKey)
	s.hosts = s.readHosts()
	return s, nil
}

// HostKeyFingerprint is the host key's SHA256 fingerprint, for the log and
// `sandboxd status`.
func (s *Server) HostKeyFingerprint() string {
	return ssh.FingerprintSHA256(s.cfg.HostKey.PublicKey())
}

func (s *Server) authenticate(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	id, ok := s.identityOf(string(key.Marshal()))
	if !ok {
		return nil, fmt.Errorf("unknown public key %s", ssh.FingerprintSHA256(key))
	}
	if ap, err := netip.ParseAddrPort(md.RemoteAddr().String()); err != nil || !id.key.allowsFrom(ap.Addr()) {
		s.log.Info("ssh key refused by its from= option", "key", id.key.Fingerprint(), "remote", md.RemoteAddr().String())
		return nil, fmt.Errorf("key %s is not allowed from %s", id.key.Fingerprint(), md.RemoteAddr())
	}
	return &ssh.Permissions{ExtraData: map[any]any{permIdentity: id}}, nil
}

// Serve accepts connections on ln until ctx ends (then it closes the server)
// or Shutdown or Close is called. It returns ErrServerClosed then.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	s.log.Info("ssh listening", "addr", ln.Addr().String(), "host_key", s.HostKeyFingerprint())
	var backoff time.Duration
	for {
		// A connection takes a handshake slot before it is accepted: past
		// MaxHandshakes, new clients wait in the kernel's backlog instead
		// of being dropped, and a flood of silent connections costs each
		// waiting client at most HandshakeTimeout.
		select {
		case s.handshake <- struct{}{}:
		case <-s.closed:
			return ErrServerClosed
		}
		nc, err := ln.Accept()
		if err != nil {
			<-s.handshake
			if s.isClosing() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors or a transient failure: slow down
				// instead of spinning, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("ssh accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept ssh connections on %s: %w", ln.Addr(), err)
		}
		backoff = 0
		if !s.track(func() { s.wg.Add(1); s.pending[nc] = struct{}{} }) {
			<-s.handshake
			nc.Close()
			return ErrServerClosed
		}
		go func() {
			defer s.wg.Done()
			s.serveConn(nc)
		}()
	}
}

// track runs add under the lock unless the server is closing.
func (s *Server) track(add func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	add()
	return true
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Shutdown stops accepting connections and new sessions, waits for the
// running sessions to end until ctx ends, and then closes every connection
// (ending whatever still runs, as a disconnect does).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.startClosing()
	s.mu.Unlock()
	var err error
	for {
		s.mu.Lock()
		n, idle := len(s.sessions), s.idle
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-idle:
			continue
		case <-ctx.Done():
			err = ctx.Err()
		}
		break
	}
	s.Close()
	return err
}

// Close closes every listener and connection at once and waits for all of
// the server's goroutines.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.startClosing()
		for nc := range s.pending {
			nc.Close()
		}
		for c := range s.conns {
			c.sconn.Close()
		}
		s.mu.Unlock()
	})
	s.wg.Wait()
	s.leftovers.Close()
	return nil
}

// startClosing stops new connections and sessions; s.mu is held.
func (s *Server) startClosing() {
	if !s.closing {
		s.closing = true
		close(s.closed)
	}
	for ln := range s.listeners {
		ln.Close()
	}
}

// SessionInfo describes a running session, for `sandboxd status`.
type SessionInfo struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Command string    `json:"command,omitempty"`
	PTY     bool      `json:"pty"`
	Remote  string    `json:"remote"`
	Start   time.Time `json:"start"`
}

// Sessions lists the sessions running now.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionInfo, 0, len(s.sessions))
	for ss := range s.sessions {
		if info, ok := ss.info(); ok {
			out = append(out, info)
		}
	}
	return out
}

// addSession registers a started session; false when shutting down.
func (s *Server) addSession(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.sessions[ss] = struct{}{}
	return true
}

func (s *Server) removeSession(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[ss]; !ok {
		return
	}
	delete(s.sessions, ss)
	if len(s.sessions) == 0 {
		close(s.idle)
		s.idle = make(chan struct{})
	}
}

// counter is a shared count with a ceiling.
type counter struct {
	n   atomic.Int32
	max int32
}

func (c *counter) acquire() bool {
	if c.n.Add(1) > c.max {
		c.n.Add(-1)
		return false
	}
	return true
}

func (c *counter) release() { c.n.Add(-1) }
