package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// daemon is a `sandboxd serve` the benchmark started.
type daemon struct {
	p       *proc
	harness string
	holder  int      // the sandbox's pid 1, from status
	ns      []string // nsenter flags, from status
	sshAddr string
	signer  ssh.Signer // the generated agent key
	keyPEM  []byte
}

type statusDoc struct {
	Sandbox struct {
		PID        int      `json:"pid"`
		Namespaces []string `json:"namespaces"`
	} `json:"sandbox"`
	SSH *struct {
		Listen string `json:"listen"`
	} `json:"ssh"`
}

// mainDaemon is the one daemon most rows measure, started on first use:
// SSH on a loopback port, the egress proxy allowed to reach loopback
// upstreams (the default policy refuses every non-global address), and
// --host because this machine is not a container.
func (b *bench) mainDaemon(ctx context.Context) (*daemon, error) {
	if b.main_ != nil {
		return b.main_, nil
	}
	d, err := b.startDaemon(ctx, "main", "--egress-allow-cidr", "127.0.0.0/8")
	if err != nil {
		return nil, err
	}
	b.main_ = d
	return d, nil
}

// harnessDir is the harness dir of the daemon the benchmark calls name, under
// /media and unique to this run.
func harnessDir(name string) string {
	return fmt.Sprintf("/media/sandboxd-bench-%d-%s", os.Getpid(), name)
}

// serveCmd is the `sandboxd serve` every daemon of the benchmark runs, the
// timed ones of the ready row included: SSH on a loopback port, --host
// because this machine is not a container, and a text log (recordPhases
// reads it); extra flags come last, so they override.
func (b *bench) serveCmd(harness string, extra ...string) *exec.Cmd {
	args := append([]string{"serve", "--harness-dir", harness, "--listen", "127.0.0.1:0", "--host", "--log-format", "text"}, extra...)
	cmd := exec.Command(b.opt.sandboxd, args...)
	cmd.Dir = "/"
	return cmd
}

// startDaemon starts `sandboxd serve` on a fresh harness dir under /media
// and waits until it is ready.
func (b *bench) startDaemon(ctx context.Context, name string, extra ...string) (*daemon, error) {
	return b.startDaemonCmd(ctx, name, func(harness string) *exec.Cmd { return b.serveCmd(harness, extra...) })
}

// startDaemonCmd is startDaemon with the command made by serve, for a
// daemon that starts wrapped (in a mount namespace of its own).
func (b *bench) startDaemonCmd(ctx context.Context, name string, serve func(harness string) *exec.Cmd) (*daemon, error) {
	harness := harnessDir(name)
	os.RemoveAll(harness)
	b.cleanup.Add("remove "+harness, func() { os.RemoveAll(harness) })
	p, err := b.startProc("sandboxd serve ("+name+")", serve(harness), filepath.Join(b.tmp, "serve-"+name+".log"), syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(harness, "run", "control.sock")
	ready := waitFor(ctx, 30*time.Second, 5*time.Millisecond, func() bool {
		_, err := os.Stat(sock)
		return err == nil || p.Exited()
	})
	if !ready || p.Exited() {
		return nil, fmt.Errorf("sandboxd serve (%s) did not become ready: %s", name, p.LogTail())
	}
	d := &daemon{p: p, harness: harness}
	var st statusDoc
	out, err := runCmd(ctx, b.opt.sandboxd, "status", "--harness-dir", harness)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("decode status: %w: %s", err, out)
	}
	d.holder, d.ns = st.Sandbox.PID, st.Sandbox.Namespaces
	if st.SSH != nil {
		d.sshAddr = st.SSH.Listen
		key, err := exec.CommandContext(ctx, b.opt.sandboxd, "keys", "--harness-dir", harness).Output()
		if err != nil {
			return nil, fmt.Errorf("sandboxd keys: %w", err)
		}
		d.keyPEM = key
		if d.signer, err = ssh.ParsePrivateKey(key); err != nil {
			return nil, fmt.Errorf("parse the agent key: %w", err)
		}
	}
	b.logf("sandboxd serve (%s) ready: pid %d, holder %d, ssh %s", name, p.PID(), d.holder, d.sshAddr)
	return d, nil
}

// checkAlive fails when the daemon has exited, with its log.
func (d *daemon) checkAlive() error {
	if d.p.Exited() {
		return fmt.Errorf("sandboxd serve exited: %v: %s", d.p.err, d.p.LogTail())
	}
	return nil
}

// execCmd is `sandboxd exec --harness-dir H -- argv...`.
func (b *bench) execCmd(d *daemon, argv ...string) *exec.Cmd {
	return exec.Command(b.opt.sandboxd, append([]string{"exec", "--harness-dir", d.harness, "--"}, argv...)...)
}

// sshTarget is an SSH server the same client measures.
type sshTarget struct {
	name   string
	addr   string
	config *ssh.ClientConfig
	algos  string // negotiated on the first connection
}

func newSSHTarget(name, addr string, signer ssh.Signer) *sshTarget {
	t := &sshTarget{name: name, addr: addr}
	t.config = &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // loopback, started by us
		Timeout:         60 * time.Second,
		AuthCallback: func(c *ssh.ClientAuthContext) (ssh.AuthMethod, error) {
			if t.algos == "" {
				a := c.Algorithms
				t.algos = fmt.Sprintf("kex %s, host key %s, cipher %s", a.KeyExchange, a.HostKey, a.Read.Cipher)
				if a.Read.MAC != "" && !strings.Contains(a.Read.Cipher, "gcm") && !strings.Contains(a.Read.Cipher, "poly1305") {
					t.algos += ", mac " + a.Read.MAC
				}
			}
			return nil, nil
		},
	}
	return t
}

func (t *sshTarget) dial() (*ssh.Client, error) {
	nc, err := net.DialTimeout("tcp", t.addr, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%s: dial: %w", t.name, err)
	}
	c, chans, reqs, err := ssh.NewClientConn(nc, t.addr, t.config)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: handshake: %w", t.name, err)
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// runOn runs command in a new session of c and returns the wall time.
func runOn(c *ssh.Client, command string) (time.Duration, error) {
	t0 := time.Now()
	s, err := c.NewSession()
	if err != nil {
		return 0, fmt.Errorf("new session: %w", err)
	}
	defer s.Close()
	if out, err := s.CombinedOutput(command); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", command, err, out)
	}
	return time.Since(t0), nil
}

// withTimeout runs fn, failing if it takes longer than d (a hung peer must
// not hang the benchmark).
func withTimeout[T any](d time.Duration, fn func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := fn()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(d):
		var zero T
		return zero, fmt.Errorf("timed out after %s", d)
	}
}
