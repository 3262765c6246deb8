package daemon

// noteRuntimeHosts names in the audit log and serve's log every host the
// harness added to a phase's policy at run time, and every addition a
// public phase made moot (config.AllowRuntimeHosts).
func (d *Daemon) noteRuntimeHosts() {
	r := d.cfg.RuntimeHosts
	d.net.AuditRuntimeHosts("agent", d.cfg.Network.Agent, r.AddedToAgent)
	d.net.AuditRuntimeHosts("verifier", d.cfg.Network.Verifier, r.AddedToVerifier)
	if r.Any() {
		d.log.Info("run-time hosts", "agent", r.AddedToAgent, "verifier", r.AddedToVerifier)
	}
	for _, n := range r.Ignored {
		d.log.Warn("run-time hosts", "note", n)
	}
}
