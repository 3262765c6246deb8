package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/netrules"
)

// peerResolveWait bounds how long serve's start waits for the peers'
// targets to resolve: a compose service may join the network a moment after
// this container starts.
var peerResolveWait = 10 * time.Second

// agentFiles are the network's files of the agent's view, as data binds.
func agentFiles(n *egress.Wiring) []bwrap.DataFile {
	var files []bwrap.DataFile
	for _, f := range n.AgentFiles() {
		files = append(files, bwrap.DataFile(f))
	}
	return files
}

// catchRules installs, inside the sandbox, the rules that send every
// outbound connection to the daemon's transparent listener.
func (d *Daemon) catchRules(ctx context.Context, p netrules.Plan) error {
	r, err := netrules.Apply(ctx, d.target, p)
	if err != nil {
		return err
	}
	d.rules = r
	// Registered before the network's own end, so it runs after it: no
	// answer is being added by then.
	d.down.Add(func() { r.Close() })
	return nil
}

// addAnswered adds addresses answered for names to the rules' answered
// set inside the sandbox.
// The rules' socket's receive timeout bounds it, not the context.
func (d *Daemon) addAnswered(_ context.Context, addrs []netip.Addr) error {
	return d.rules.AddAnswered(addrs)
}

// writeVisitorResolvConf writes the sandbox's resolv.conf for the visitors'
// views (the verifier, the healthcheck, the collect hooks), so that they ask
// the sandbox's resolver as the agent does.
func (d *Daemon) writeVisitorResolvConf(runDir string) error {
	conf := d.net.ResolvConf()
	if conf == nil {
		return nil
	}
	d.visitorResolv = filepath.Join(runDir, "resolv.conf")
	if err := os.WriteFile(d.visitorResolv, conf, 0o644); err != nil {
		return fmt.Errorf("write the visitors' resolv.conf: %w", err)
	}
	return nil
}
