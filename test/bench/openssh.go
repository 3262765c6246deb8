package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// openSSH is OpenSSH's sshd, started by the benchmark on a loopback port with
// a configuration of its own: no PAM (a container has none to speak of), its
// own host key (ed25519, like sandboxd's), the agent key of the main daemon
// authorized for root. Its limits are raised to sandboxd's own (64 sessions
// per connection, 64 connections in handshake) so that the concurrency rows
// measure both at the same load, never one refusing it.
type openSSH struct {
	p    *proc
	addr string
}

func (b *bench) openSSH(ctx context.Context, signer ssh.Signer) (*openSSH, error) {
	if b.sshd_ != nil {
		return b.sshd_, nil
	}
	o, err := b.startOpenSSH(ctx, signer, "sshd", true)
	b.sshd_ = o
	return o, err
}

// startOpenSSH starts one sshd; sameShell makes its sessions' bash skip
// ~/.bashrc as sandboxd's do (see SetEnv below).
func (b *bench) startOpenSSH(ctx context.Context, signer ssh.Signer, name string, sameShell bool) (*openSSH, error) {
	dir := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	hostKey := filepath.Join(dir, "host_ed25519")
	if _, err := runCmd(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey); err != nil {
		return nil, err
	}
	authKeys := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authKeys, ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sshd_config")
	cfg := fmt.Sprintf(`# written by test/bench
Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 64
MaxStartups 64
LogLevel ERROR
`, port, hostKey, filepath.Join(dir, "sshd.pid"), authKeys)
	if sameShell {
		cfg += `# Debian's bash sources ~/.bashrc for a command whose environment has
# SSH_CLIENT (sshd sets it; sandboxd does not) when SHLVL is below 2. Root's
# ~/.bashrc on a developer machine may take 100 ms or more (pyenv init);
# SHLVL=1 makes both servers run the same bash -c, with no rc file.
SetEnv SHLVL=1
`
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	// sshd's privilege separation directory; the package creates it at boot.
	if _, err := os.Stat("/run/sshd"); os.IsNotExist(err) {
		if err := os.Mkdir("/run/sshd", 0o755); err != nil {
			return nil, err
		}
		b.cleanup.Add("remove /run/sshd", func() { os.Remove("/run/sshd") })
	}
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd = "/usr/sbin/sshd"
	}
	if out, err := runCmd(ctx, sshd, "-t", "-f", conf); err != nil {
		return nil, fmt.Errorf("sshd refuses the generated config: %w: %s", err, out)
	}
	p, addr, err := b.startServer(ctx, "OpenSSH "+name, exec.Command(sshd, "-D", "-e", "-f", conf), filepath.Join(dir, "sshd.log"), port)
	if err != nil {
		return nil, err
	}
	return &openSSH{p: p, addr: addr}, nil
}
