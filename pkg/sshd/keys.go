package sshd

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

// AuthorizedKey is one accepted line of an OpenSSH authorized_keys file.
type AuthorizedKey struct {
	Key     ssh.PublicKey
	Comment string
	Line    int // 1-based line in its file, for logs
	// From holds the from="…" patterns (OpenSSH syntax: comma-separated,
	// wildcards, CIDR, '!' negation); empty allows every address.
	From []string
	// NoPTY refuses pty-req (no-pty, restrict).
	NoPTY bool
	// NoPortForwarding refuses direct-tcpip (no-port-forwarding, restrict).
	NoPortForwarding bool
}

// Fingerprint is the key's SHA256 fingerprint as ssh-keygen -l prints it.
func (k AuthorizedKey) Fingerprint() string { return ssh.FingerprintSHA256(k.Key) }

// KeyLineError is an authorized_keys line that was refused, and why.
type KeyLineError struct {
	Line   int
	Reason string
}

func (e *KeyLineError) Error() string {
	return fmt.Sprintf("authorized keys line %d refused: %s", e.Line, e.Reason)
}

// ParseAuthorizedKeys reads OpenSSH authorized_keys lines. A line whose
// options sandboxd cannot honour is refused as a whole, never accepted with
// the option dropped: a key limited by command="…" or permitopen="…" must
// not become a key with a shell. The refusals come back one per line, for
// the caller to log; the other lines are still accepted.
//
// Honoured: from="…", restrict, no-pty, pty, no-port-forwarding,
// port-forwarding. Accepted and meaningless here (sandboxd never offers agent
// or X11 forwarding, nor runs rc files): no-agent-forwarding,
// agent-forwarding, no-X11-forwarding, X11-forwarding, no-user-rc, user-rc.
// Refused: every other option (command=, environment=, permitopen=,
// permitlisten=, principals=, cert-authority, tunnel=, expiry-time=,
// no-touch-required, verify-required, …).
func ParseAuthorizedKeys(data []byte) ([]AuthorizedKey, []error) {
	var keys []AuthorizedKey
	var refused []error
	for i, raw := range bytes.Split(data, []byte("\n")) {
		line := bytes.TrimSpace(raw)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		n := i + 1
		pub, comment, options, rest, err := ssh.ParseAuthorizedKey(line)
		if err != nil || len(bytes.TrimSpace(rest)) > 0 {
			refused = append(refused, &KeyLineError{Line: n, Reason: "not a public key in OpenSSH authorized_keys format"})
			continue
		}
		k := AuthorizedKey{Key: pub, Comment: comment, Line: n}
		if reason := k.applyOptions(options); reason != "" {
			refused = append(refused, &KeyLineError{Line: n, Reason: reason})
			continue
		}
		keys = append(keys, k)
	}
	return keys, refused
}

func (k *AuthorizedKey) applyOptions(options []string) string {
	for _, opt := range options {
		name, value, hasValue := strings.Cut(opt, "=")
		switch strings.ToLower(name) {
		case "from":
			if !hasValue {
				return `from needs a value: from="pattern,…"`
			}
			v, err := unquote(value)
			if err != nil {
				return "from: " + err.Error()
			}
			patterns := strings.Split(v, ",")
			for _, p := range patterns {
				if err := checkPattern(p); err != nil {
					return fmt.Sprintf("from=%q: %v", v, err)
				}
			}
			k.From = append(k.From, patterns...)
		case "restrict":
			k.NoPTY, k.NoPortForwarding = true, true
		case "no-pty":
			k.NoPTY = true
		case "pty":
			k.NoPTY = false
		case "no-port-forwarding":
			k.NoPortForwarding = true
		case "port-forwarding":
			k.NoPortForwarding = false
		case "no-agent-forwarding", "agent-forwarding", "no-x11-forwarding", "x11-forwarding", "no-user-rc", "user-rc":
		default:
			return fmt.Sprintf("option %q is not supported by sandboxd; remove it or the key", name)
		}
	}
	return ""
}

func unquote(v string) (string, error) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", errors.New("value must be in double quotes")
	}
	return strings.ReplaceAll(v[1:len(v)-1], `\"`, `"`), nil
}

func checkPattern(p string) error {
	p = strings.TrimPrefix(p, "!")
	if p == "" {
		return errors.New("empty pattern")
	}
	if strings.Contains(p, "/") {
		if _, err := netip.ParsePrefix(p); err != nil {
			return fmt.Errorf("bad CIDR %q", p)
		}
		return nil
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("bad pattern %q", p)
	}
	return nil
}

// allowsFrom applies the from= patterns to the client's address as OpenSSH
// does without DNS (UseDNS no): a negated match refuses, else any match
// allows, else the key is refused.
func (k AuthorizedKey) allowsFrom(addr netip.Addr) bool {
	if len(k.From) == 0 {
		return true
	}
	addr = addr.Unmap()
	allowed := false
	for _, p := range k.From {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		var hit bool
		if strings.Contains(p, "/") {
			pfx, err := netip.ParsePrefix(p)
			hit = err == nil && pfx.Contains(addr)
		} else {
			hit, _ = path.Match(p, addr.String())
		}
		if hit && neg {
			return false
		}
		allowed = allowed || hit
	}
	return allowed
}

// LoadOrCreateHostKey reads the host key at path, or creates an ed25519 key
// there (mode 0600) when none exists yet, so the fingerprint stays the same
// across restarts.
func LoadOrCreateHostKey(path string) (ssh.Signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, fmt.Errorf("generate host key: %w", gerr)
		}
		if data, err = writePrivateKey(path, priv, "sandboxd host key"); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("read host key %s: %w", path, err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("parse host key %s: %w (an unencrypted OpenSSH or PEM private key is needed)", path, err)
	}
	return signer, nil
}

// AgentKey is the key pair generated for agents when the operator gave
// none; `sandboxd keys` prints Private.
type AgentKey struct {
	PrivatePath string
	Private     []byte // OpenSSH PEM private key
	Public      ssh.PublicKey
}

// Authorized is the key as an authorized key without options.
func (a AgentKey) Authorized() AuthorizedKey {
	return AuthorizedKey{Key: a.Public, Comment: "sandboxd agent key", Line: 1}
}

// GenerateAgentKey returns the agent key pair kept in dir (the harness dir,
// which the sandbox cannot see:
// docs/failures.md#key-material-never-inside-the-sandbox), creating it on
// first use.
func GenerateAgentKey(dir string) (AgentKey, error) {
	privPath := filepath.Join(dir, "agent_ed25519")
	data, err := os.ReadFile(privPath)
	if errors.Is(err, os.ErrNotExist) {
		pub, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return AgentKey{}, fmt.Errorf("generate agent key: %w", gerr)
		}
		if data, err = writePrivateKey(privPath, priv, "sandboxd agent key"); err != nil {
			return AgentKey{}, err
		}
		sshPub, err := ssh.NewPublicKey(pub)
		if err != nil {
			return AgentKey{}, fmt.Errorf("encode agent public key: %w", err)
		}
		line := bytes.TrimSpace(ssh.MarshalAuthorizedKey(sshPub))
		line = append(line, []byte(" sandboxd agent key\n")...)
		if err := writeFileAtomic(privPath+".pub", line, 0o644); err != nil {
			return AgentKey{}, err
		}
	} else if err != nil {
		return AgentKey{}, fmt.Errorf("read agent key %s: %w", privPath, err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return AgentKey{}, fmt.Errorf("parse agent key %s: %w", privPath, err)
	}
	return AgentKey{PrivatePath: privPath, Private: data, Public: signer.PublicKey()}, nil
}

func writePrivateKey(path string, priv ed25519.PrivateKey, comment string) ([]byte, error) {
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("encode private key for %s: %w", path, err)
	}
	data := pem.EncodeToMemory(block)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create key directory for %s: %w", path, err)
	}
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return nil, err
	}
	return data, nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory, so that a crash never leaves half a key behind.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return nil
}
