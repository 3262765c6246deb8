package sshd

import (
	"log/slog"
	"net/netip"
	"os"
	"path"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// The decoders of the SSH channel requests a client sends before and during a
// session (env, pty-req, window-change, signal) and of the channel-open
// payload of direct-tcpip are the first code that reads what a remote peer
// wrote. These targets feed them arbitrary payloads through the very methods
// the server calls, and check what they let through. Run them with
// scripts/fuzz.sh (every target in the repository) or, one at a time:
//
//	go test -run '^$' -fuzz '^FuzzEnvRequest$' -fuzztime 10m ./pkg/sshd/

// fuzzSession is a session of an agent connection that has not started its
// command yet: what every request before exec/shell/subsystem sees.
func fuzzSession(acceptEnv ...string) *session {
	s := &Server{cfg: Config{AcceptEnv: acceptEnv}, log: slog.New(slog.DiscardHandler)}
	c := &conn{s: s, id: &identity{}, log: s.log}
	return &session{c: c, done: make(chan struct{})}
}

// envPayload is what an OpenSSH client sends for SendEnv/SetEnv.
func envPayload(name, value string) []byte {
	return ssh.Marshal(struct{ Name, Value string }{name, value})
}

func FuzzEnvRequest(f *testing.F) {
	f.Add(envPayload("LANG", "C.UTF-8"), envPayload("LC_ALL", "en_US.UTF-8"))
	f.Add(envPayload("TERM", "xterm-256color"), envPayload("TERM", "dumb"))
	f.Add(envPayload("LD_PRELOAD", "/tmp/x.so"), envPayload("PATH", "/tmp"))
	f.Add(envPayload("LC_X=Y", "v"), envPayload("LANG\x00", "v"))
	f.Add(envPayload("FOO_BAR", strings.Repeat("v", 300<<10)), envPayload("FOO_", "a\x00b"))
	f.Add([]byte{0, 0, 0, 4, 'L', 'A', 'N', 'G'}, []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		ss := fuzzSession("FOO_*")
		for _, p := range [][]byte{first, second} {
			var req struct{ Name, Value string }
			decoded := ssh.Unmarshal(p, &req) == nil
			ok := ss.setEnv(p)
			if !ok {
				continue
			}
			if !decoded {
				t.Fatalf("accepted an env request that does not decode: %q", p)
			}
			if req.Name == "" || strings.ContainsAny(req.Name, "=\x00") || strings.ContainsRune(req.Value, 0) {
				t.Fatalf("accepted env %q=%q", req.Name, req.Value)
			}
			if !(req.Name == "LANG" || req.Name == "TERM" || strings.HasPrefix(req.Name, "LC_") || strings.HasPrefix(req.Name, "FOO_")) {
				t.Fatalf("accepted %q, which no AcceptEnv pattern names", req.Name)
			}
		}
		if len(ss.env) > maxEnvVars || ss.envBytes > maxEnvBytes {
			t.Fatalf("env grew past its bounds: %d variables, %d bytes", len(ss.env), ss.envBytes)
		}
		seen := map[string]bool{}
		for _, kv := range ss.env {
			name, _, ok := strings.Cut(kv, "=")
			if !ok || seen[name] {
				t.Fatalf("env list %q is not one NAME=VALUE per name", ss.env)
			}
			seen[name] = true
		}
		// Nothing is accepted once a command runs.
		ss.started = true
		if ss.setEnv(envPayload("LANG", "C")) {
			t.Fatal("env accepted after the command started")
		}
	})
}

// ptyPayload is RFC 4254 §6.2's pty-req.
func ptyPayload(term string, cols, rows, w, h uint32, modes []byte) []byte {
	return ssh.Marshal(struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}{term, cols, rows, w, h, string(modes)})
}

func FuzzPtyReq(f *testing.F) {
	// OpenSSH's usual modes: VINTR ^C, VERASE DEL, ISPEED/OSPEED 38400, ICRNL, IUTF8, ECHO.
	openssh := []byte{1, 0, 0, 0, 3, 3, 0, 0, 0, 0x7f, 128, 0, 0, 0x96, 0, 129, 0, 0, 0x96, 0, 36, 0, 0, 0, 1, 42, 0, 0, 0, 1, 53, 0, 0, 0, 1, 0}
	f.Add(ptyPayload("xterm-256color", 80, 24, 640, 480, openssh), uint32(100), uint32(30))
	f.Add(ptyPayload("", 0, 0, 0, 0, nil), uint32(0), uint32(0))
	f.Add(ptyPayload("vt100", 1<<31, 1<<31, 1<<31, 1<<31, []byte{3, 0, 0, 0, 255, 0}), uint32(1<<32-1), uint32(1<<32-1))
	f.Add(ptyPayload(strings.Repeat("x", 257), 80, 24, 0, 0, []byte{160, 0, 0, 0, 1}), uint32(80), uint32(24))
	f.Add(ptyPayload("xterm\x00evil", 80, 24, 0, 0, []byte{129, 0, 0}), uint32(80), uint32(24))
	f.Fuzz(func(t *testing.T, payload []byte, cols, rows uint32) {
		ss := fuzzSession()
		if !ss.ptyReq(payload) {
			if ss.pty != nil {
				t.Fatal("a refused pty-req left a pty behind")
			}
			return
		}
		p := ss.pty
		if len(p.Term) > 256 || strings.ContainsRune(p.Term, 0) {
			t.Fatalf("accepted TERM %q", p.Term)
		}
		checkSize(t, p.Size)
		// The modes reach the kernel through ApplyModes: it must take any
		// bytes a client sends.
		var tio unix.Termios
		ptyrelay.ApplyModes(&tio, p.Modes)

		// window-change before the command starts replaces the size.
		if !ss.windowChange(ssh.Marshal(struct{ Cols, Rows, Width, Height uint32 }{cols, rows, cols, rows})) {
			t.Fatal("window-change refused on a session with a pty")
		}
		checkSize(t, ss.pty.Size)
		if ss.pty.Size.Cols != min(cols, ptyrelay.MaxCols) || ss.pty.Size.Rows != min(rows, ptyrelay.MaxRows) {
			t.Fatalf("window-change %dx%d became %+v", cols, rows, ss.pty.Size)
		}
		// A second pty-req after the command started is refused.
		ss.started = true
		if ss.ptyReq(payload) {
			t.Fatal("pty-req accepted after the command started")
		}
	})
}

func checkSize(t *testing.T, s ptyrelay.Size) {
	t.Helper()
	if s.Cols > ptyrelay.MaxCols || s.Rows > ptyrelay.MaxRows || s.XPixels > 65535 || s.YPixels > 65535 {
		t.Fatalf("size %+v is not clamped", s)
	}
}

func FuzzWindowChange(f *testing.F) {
	f.Add(ssh.Marshal(struct{ Cols, Rows, Width, Height uint32 }{80, 24, 0, 0}))
	f.Add(ssh.Marshal(struct{ Cols, Rows, Width, Height uint32 }{1<<32 - 1, 1<<32 - 1, 1<<32 - 1, 1<<32 - 1}))
	f.Add([]byte{0, 0, 0, 80, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		// Without a pty, window-change is refused and nothing is made.
		ss := fuzzSession()
		if ss.windowChange(payload) || ss.pty != nil {
			t.Fatal("window-change accepted on a session without a pty")
		}
		ss.pty = &ptyrelay.PTY{Term: "xterm"}
		var want struct{ Cols, Rows, Width, Height uint32 }
		decodes := ssh.Unmarshal(payload, &want) == nil
		if got := ss.windowChange(payload); got != decodes {
			t.Fatalf("window-change returned %v for a payload that decodes=%v: %q", got, decodes, payload)
		}
		checkSize(t, ss.pty.Size)
	})
}

func FuzzSignalRequest(f *testing.F) {
	for _, s := range []string{"TERM", "SIGKILL", "INT", "", "SIG", "SIGSIGTERM", "TERM\x00", "RTMIN+3"} {
		f.Add(ssh.Marshal(struct{ Signal string }{s}))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		// Before the command starts there is nothing to signal.
		ss := fuzzSession()
		if ss.signal(payload) {
			t.Fatal("signal accepted with no command running")
		}
		var p struct{ Signal string }
		if ssh.Unmarshal(payload, &p) != nil {
			return
		}
		sig, ok := ptyrelay.ParseSignal(p.Signal)
		if !ok {
			return
		}
		// What ParseSignal accepts is a real signal whose name parses back.
		if sig <= 0 || sig > 64 {
			t.Fatalf("%q parsed as signal %d", p.Signal, sig)
		}
		back, ok := ptyrelay.ParseSignal(ptyrelay.SignalName(sig))
		if !ok || back != sig {
			t.Fatalf("%q → %d → %q → %d", p.Signal, sig, ptyrelay.SignalName(sig), back)
		}
	})
}

// FuzzExitPayloads checks the payloads finish sends, decoded the way
// golang.org/x/crypto/ssh and OpenSSH's client decode them: whatever the
// command's status, the client reads back the same code, or the same signal
// name with the core flag.
func FuzzExitPayloads(f *testing.F) {
	f.Add(uint32(0), "", false)
	f.Add(uint32(255), "KILL", true)
	f.Add(uint32(1<<32-1), "SIG\x00X", false)
	f.Fuzz(func(t *testing.T, code uint32, sig string, core bool) {
		var status struct{ Status uint32 }
		if err := ssh.Unmarshal(ssh.Marshal(struct{ Status uint32 }{code}), &status); err != nil || status.Status != code {
			t.Fatalf("exit-status %d read back as %d (%v)", code, status.Status, err)
		}
		type exitSignal struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}
		var es exitSignal
		if err := ssh.Unmarshal(ssh.Marshal(exitSignal{sig, core, "", ""}), &es); err != nil || es.Signal != sig || es.CoreDumped != core {
			t.Fatalf("exit-signal %q/%v read back as %+v (%v)", sig, core, es, err)
		}
	})
}

// FuzzDirectTCPIP decodes a direct-tcpip channel-open payload as forward
// does and resolves its host as the server would, against this machine's
// hosts file (the target here is the test process itself): whatever comes
// in, the result is a valid address or a refusal, and localhost and the
// empty host stay on the sandbox's loopback.
func FuzzDirectTCPIP(f *testing.F) {
	payload := func(host string, port uint32) []byte {
		return ssh.Marshal(struct {
			Host     string
			Port     uint32
			OrigHost string
			OrigPort uint32
		}{host, port, "127.0.0.1", 5555})
	}
	for _, h := range []string{"localhost", "", "[::1]", "127.0.0.1", "::ffff:10.0.0.1", "fe80::1%eth0", "LOCALHOST", "[", "]", "a b", "peer"} {
		f.Add(payload(h, 8080))
	}
	f.Add(payload("localhost", 0))
	f.Add(payload("localhost", 70000))
	s := &Server{cfg: Config{Target: join.Target{PID: os.Getpid()}}, log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p struct {
			Host     string
			Port     uint32
			OrigHost string
			OrigPort uint32
		}
		if err := ssh.Unmarshal(data, &p); err != nil || p.Port == 0 || p.Port > 65535 {
			return // forward rejects it before resolving
		}
		a, err := s.resolve(p.Host)
		if err != nil {
			return
		}
		if !a.IsValid() {
			t.Fatalf("%q resolved to an invalid address without an error", p.Host)
		}
		if a.Is4In6() {
			t.Fatalf("%q resolved to the IPv4-mapped %s: the dial inside picks the family from it", p.Host, a)
		}
		h := strings.TrimSuffix(strings.TrimPrefix(p.Host, "["), "]")
		if (h == "" || strings.EqualFold(h, "localhost")) && a != netip.MustParseAddr("127.0.0.1") {
			if _, perr := netip.ParseAddr(h); perr != nil {
				t.Fatalf("%q resolved to %s, not the sandbox's loopback", p.Host, a)
			}
		}
	})
}

// FuzzAuthorizedKeys feeds authorized_keys text to the parser with a real key
// and arbitrary options: an accepted line carries only options sandboxd
// honours, and from= behaves as OpenSSH's does for the addresses tried.
func FuzzAuthorizedKeys(f *testing.F) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGEe3z4fkV0DDHbxnzXGyCBXCHRtkRgGWqmZOXmJ5Acd fuzz@sandboxd"
	for _, opts := range []string{
		"", `from="10.0.0.0/8"`, `from="!10.0.0.1,10.0.0.0/8"`, `from="192.168.*,::1"`, `restrict,pty`,
		`command="sh"`, `permitopen="x:1"`, `from="[bad"`, `from=""`, `from="a\"b"`, `no-pty,from="*"`,
		`environment="A=B"`, `FROM="127.0.0.1"`, `from="10.0.0.0/33"`,
	} {
		line := key
		if opts != "" {
			line = opts + " " + key
		}
		f.Add([]byte(line), []byte{10, 0, 0, 1})
	}
	f.Add([]byte("#comment\n\n"+key+"\n"+key+" trailing\n"), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data, ip []byte) {
		keys, refused := ParseAuthorizedKeys(data)
		lines := 0
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
				lines++
			}
		}
		if len(keys)+len(refused) > lines {
			t.Fatalf("%d keys and %d refusals from %d lines", len(keys), len(refused), lines)
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		addr = addr.Unmap()
		for _, k := range keys {
			if k.Key == nil {
				t.Fatal("accepted a line without a key")
			}
			for _, p := range k.From {
				if err := checkPattern(p); err != nil {
					t.Fatalf("accepted from pattern %q: %v", p, err)
				}
			}
			allowed := k.allowsFrom(addr)
			if len(k.From) == 0 && !allowed {
				t.Fatal("a key without from= refused an address")
			}
			// A negated pattern that matches always refuses.
			for _, p := range k.From {
				if neg, ok := strings.CutPrefix(p, "!"); ok && patternMatches(neg, addr) && allowed {
					t.Fatalf("from=%q allowed %s, which the negated %q matches", k.From, addr, p)
				}
			}
			// Without negations, allowed means some pattern matches.
			if allowed && len(k.From) > 0 {
				any := false
				for _, p := range k.From {
					if !strings.HasPrefix(p, "!") && patternMatches(p, addr) {
						any = true
					}
				}
				if !any {
					t.Fatalf("from=%q allowed %s, which no pattern matches", k.From, addr)
				}
			}
		}
	})
}

// patternMatches is the reference for one from= pattern.
func patternMatches(p string, a netip.Addr) bool {
	if strings.Contains(p, "/") {
		pfx, err := netip.ParsePrefix(p)
		return err == nil && pfx.Contains(a)
	}
	ok, _ := path.Match(p, a.String())
	return ok
}
