package daemon

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/pkg/sshd"
)

// sshDoor is the running SSH server and what `keys` prints.
type sshDoor struct {
	server     *sshd.Server
	listener   net.Listener
	agentKey   []byte // the generated private key, when the agent keys were not given
	listen     string
	hostKeyFP  string
	recordsDir string
}

// sshKeys are the SSH door's keys: the host key, and the agent and harness
// keys given or generated.
type sshKeys struct {
	host     ssh.Signer
	agent    []sshd.AuthorizedKey
	agentKey []byte // the generated private key, when the agent keys were not given
	harness  []sshd.AuthorizedKey
}

// loadSSHKeysAhead begins reading or making the SSH door's keys, which
// startSSH waits for: a generated key's files are written and synced to
// disk, and that waiting is done while bwrap builds the sandbox. Without
// an SSH door it returns nil.
func (d *Daemon) loadSSHKeysAhead() func() (sshKeys, error) {
	if d.cfg.SSH.Listen == "" {
		return nil
	}
	type loaded struct {
		keys sshKeys
		err  error
	}
	ch := make(chan loaded, 1)
	go func() {
		k, err := d.loadSSHKeys()
		ch <- loaded{k, err}
	}()
	return sync.OnceValues(func() (sshKeys, error) {
		l := <-ch
		return l.keys, l.err
	})
}

// loadSSHKeys reads the SSH door's keys, or makes them into the harness dir.
func (d *Daemon) loadSSHKeys() (sshKeys, error) {
	c := d.cfg.SSH
	keysDir := d.harnessPath("keys")
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		return sshKeys{}, fmt.Errorf("create keys dir: %w", err)
	}
	hostKeyPath := c.HostKey
	if hostKeyPath == "" {
		hostKeyPath = d.harnessPath("keys", "host_ed25519")
	}
	var k sshKeys
	var err error
	if k.host, err = sshd.LoadOrCreateHostKey(hostKeyPath); err != nil {
		return sshKeys{}, err
	}
	var errs []error
	k.agent, errs = sshd.ParseAuthorizedKeys(c.AuthorizedKeys)
	for _, e := range errs {
		d.log.Warn("agent key refused", "err", e)
	}
	if len(k.agent) == 0 {
		if len(bytes.TrimSpace(c.AuthorizedKeys)) > 0 {
			return sshKeys{}, fmt.Errorf("none of the agent keys given could be used (see the warnings above); fix them or give none to have a key generated")
		}
		generated, err := sshd.GenerateAgentKey(keysDir)
		if err != nil {
			return sshKeys{}, err
		}
		k.agent = append(k.agent, generated.Authorized())
		k.agentKey = generated.Private
	}
	k.harness, errs = sshd.ParseAuthorizedKeys(c.HarnessKeys)
	for _, e := range errs {
		d.log.Warn("harness key refused", "err", e)
	}
	return k, nil
}

// startSSH opens the SSH listener in the substrate's network, which the
// sandbox's own namespace cannot reach.
func (d *Daemon) startSSH(ctx context.Context) (*sshDoor, error) {
	c := d.cfg.SSH
	if c.Listen == "" {
		return nil, nil
	}
	keys, err := d.sshKeys()
	if err != nil {
		return nil, err
	}
	door := &sshDoor{listen: c.Listen, recordsDir: d.harnessPath("records"), agentKey: keys.agentKey}
	srv, err := sshd.New(sshd.Config{
		Target:         d.target,
		Agent:          d.sshAgent,
		HostKey:        keys.host,
		AgentKeys:      keys.agent,
		HarnessKeys:    keys.harness,
		AcceptEnv:      c.AcceptEnv,
		RecordsDir:     door.recordsDir,
		SessionTimeout: c.SessionTimeout,
		Harness:        d.harnessCommand,
		Gone:           d.goneReason,
		Log:            d.log.With("door", "ssh"),
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("listen for SSH on %s: %w (choose another with --listen)", c.Listen, err)
	}
	door.server, door.listener = srv, ln
	door.hostKeyFP = srv.HostKeyFingerprint()
	door.listen = ln.Addr().String()
	d.log.Info("ssh listening", "addr", door.listen, "host_key", door.hostKeyFP, "agent_keys", len(keys.agent), "harness_keys", len(keys.harness))
	return door, nil
}

// sshAgent is who an SSH agent session runs as: the agent user, always,
// whatever login name the client gave.
func (d *Daemon) sshAgent() (sshd.Agent, error) {
	if d.holderGone() {
		return sshd.Agent{}, fmt.Errorf("the sandbox is gone; no session can start")
	}
	return sshd.Agent{User: d.agent, Env: d.agentEnv(d.agent, nil), Dir: d.cfg.Workdir}, nil
}

// goneReason is what a session's client is told when the sandbox died under
// it. Sessions die with the sandbox's pid namespace a moment before bwrap
// notices, so a little of that moment is waited for.
func (d *Daemon) goneReason() string {
	select {
	case <-d.holder.Done():
	case <-time.After(300 * time.Millisecond):
	}
	if d.holderGone() {
		return "the sandbox is gone (its holder died): this session ended with it, and serve is stopping"
	}
	return ""
}

// holderGone reports whether the sandbox's pid 1 has died. bwrap notices a
// moment after the sessions do, so its exit is not waited for: pid 1 gone or
// a zombie is enough.
func (d *Daemon) holderGone() bool {
	select {
	case <-d.holder.Done():
		return true
	default:
	}
	if exited, ok := d.holder.Pid1Exited(); ok {
		return exited
	}
	st, err := procfs.ReadStat(d.holder.PID)
	return err != nil || st.State == 'Z' || st.State == 'X'
}
