package egress

import (
	"context"
	"log/slog"
)

// AuditRuntimeHosts records in the audit log, once serving has started,
// the hosts a harness added to a phase's policy at run time
// (--allow-agent-host, --allow-environment-host), beside the policy they
// widened: a reader of the log tells them apart from the task's own.
func (w *Wiring) AuditRuntimeHosts(label string, p Policy, added []string) {
	if w.audit == nil || len(added) == 0 {
		return
	}
	w.audit.log.LogAttrs(context.Background(), slog.LevelInfo, "runtime-hosts",
		slog.String("proxy", label), slog.String("mode", string(p.Mode)),
		slog.Any("allowed_hosts", p.AllowedHosts), slog.Any("added_at_run_time", added))
}
