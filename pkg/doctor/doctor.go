// Package doctor is `sandboxd doctor`: it builds a throwaway sandbox with
// exactly the options serve uses, joins it as a session would, and names
// each runtime permission that is missing with the flag that grants it.
package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/netrules"
)

// Config is what serve would be started with.
type Config struct {
	Bwrap     string
	AgentUser string
	// NoExec, when set, says why no program of the image may run (a serve
	// holds the harness dir, or an agent has had this root filesystem):
	// doctor then makes only the checks that execute nothing and builds no
	// sandbox, and the report is not OK.
	NoExec string
}

// Check is one requirement and whether it is met. A warning is met (serve
// starts) but names something the agent's programs will miss.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Warn   bool   `json:"warn,omitempty"`
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the doctor's verdict: OK exactly when serve would start.
type Report struct {
	OK      bool    `json:"ok"`
	Refused string  `json:"refused,omitempty"` // why no program of the image was run (Config.NoExec)
	Bwrap   string  `json:"bwrap,omitempty"`
	Runtime string  `json:"runtime"`
	Checks  []Check `json:"checks"`
}

// runtimeFlags names, for each way a container runtime can withhold what the
// sandbox needs, the flags that grant it. The error strings are bwrap's own,
// as measured on bwrap 0.4.1 and 0.8 under Docker (docs/container-flags.md).
var runtimeFlags = []struct {
	name    string
	matches []string
	fix     string
}{
	{
		name:    "identity map (CAP_SETFCAP)",
		matches: []string{"setting up uid map", "Value too large for defined data type", "id map refused"},
		fix:     "the kernel refused the identity map: mapping parent uid 0 needs CAP_SETFCAP (Docker grants it by default: do not --cap-drop SETFCAP), or serve with --allow-degraded to accept a single-id map",
	},
	{
		name:    "user namespaces (sysctl)",
		matches: []string{"max_*_namespaces exceeded", "No space left on device"},
		fix:     "user namespaces are switched off: on the host, sysctl -w user.max_user_namespaces=15000",
	},
	{
		name:    "namespaces (seccomp)",
		matches: []string{"No permissions to create new namespace", "No permissions to creating new namespace", "Creating new namespace failed: Operation not permitted"},
		fix:     "the runtime's seccomp profile forbids namespaces: Docker and podman --security-opt seccomp=images/seccomp.json (Docker's default plus namespaces, mount and pivot_root); Kubernetes securityContext.seccompProfile {type: Localhost, localhostProfile: " + Runtime.SeccompLocalhost + "} (adapt --k8s writes it). If the profile is already ours, also check --security-opt systempaths=unconfined",
	},
	{
		name:    "pivot_root (seccomp)",
		matches: []string{"pivot_root: Operation not permitted", "unmount old root"},
		fix:     "Docker's default seccomp profile forbids pivot_root outright, even with --cap-add SYS_ADMIN: --security-opt seccomp=images/seccomp.json",
	},
	{
		name:    "mount (AppArmor)",
		matches: []string{"Permission denied"},
		fix:     "an AppArmor (or SELinux) profile denies mount: Docker and podman --security-opt apparmor=unconfined; Kubernetes securityContext.appArmorProfile {type: " + Runtime.AppArmor + "}",
	},
	{
		name:    "mount (seccomp)",
		matches: []string{"Failed to make / slave: Operation not permitted"},
		fix:     "the seccomp profile forbids mount: --security-opt seccomp=images/seccomp.json",
	},
	{
		name:    "fresh /proc (masked paths)",
		matches: []string{"Can't mount proc"},
		fix:     "the runtime masks /proc, so a fresh proc mount is \"too revealing\": Docker --security-opt systempaths=unconfined; podman --security-opt unmask=ALL; Kubernetes securityContext.procMount: " + Runtime.ProcMount + " (with hostUsers: false)",
	},
	{
		name:    "loopback (gVisor)",
		matches: []string{"RTM_NEWADDR"},
		fix:     "gVisor already brings up lo in a new network namespace and bwrap's --unshare-net fails; run this image with runc (or crun), not runsc",
	},
	{
		name:    "setns (seccomp)",
		matches: []string{"reassociate to namespace", "could not join the sandbox's namespaces (operation not permitted)"},
		fix:     "the sandbox builds but cannot be joined: the seccomp profile forbids setns; --security-opt seccomp=images/seccomp.json",
	},
}

// Run builds a throwaway sandbox with exactly the options serve uses, joins
// it the way a session would, and names each missing runtime permission with
// the flag that grants it.
func Run(ctx context.Context, cfg Config) Report {
	r := Report{Runtime: detectRuntime()}
	add := func(c Check) { r.Checks = append(r.Checks, c) }

	if os.Geteuid() != 0 {
		add(Check{Name: "root", Detail: fmt.Sprintf("running as uid %d", os.Geteuid()), Fix: "serve runs as root in the container (adapted images say USER root); run doctor as root"})
		return r
	}
	add(Check{Name: "root", OK: true})
	if cfg.NoExec != "" {
		return doctorNoExec(r, cfg)
	}

	path, v, err := bwrap.Probe(ctx, orDefault(cfg.Bwrap, "bwrap"))
	if err != nil {
		add(Check{Name: "bubblewrap", Detail: err.Error(), Fix: "install bubblewrap ≥ 0.4.0 with the image's package manager"})
		return r
	}
	r.Bwrap = v.String()
	add(Check{Name: "bubblewrap", OK: true, Detail: fmt.Sprintf("%s %s", path, v)})
	for _, c := range hostChecks() {
		add(c)
		if !c.OK {
			return r
		}
	}
	// Everything that can be read without bwrap is named first; then bwrap
	// itself is tried, and its own words classified.
	pre := preflight()
	for _, c := range pre {
		add(c)
	}
	add(newSyscalls())

	harness, err := os.MkdirTemp("/media", "sandboxd-doctor-")
	if err != nil {
		if err := os.MkdirAll("/media", 0o755); err == nil {
			harness, err = os.MkdirTemp("/media", "sandboxd-doctor-")
		}
		if err != nil {
			add(Check{Name: "harness dir", Detail: err.Error(), Fix: "make /media writable for root"})
			return r
		}
	}
	defer os.RemoveAll(harness)
	os.WriteFile(filepath.Join(harness, masks.HarnessMarker), nil, 0o600)
	if real, err := bwrap.RealPath(harness); err == nil {
		harness = real // /media may be a symlink: only a real path is hidden
	}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := bwrap.Start(ctx, bwrap.Config{Bwrap: path, Workdir: "/", Hide: []string{harness}, Mask: nil})
	if err != nil {
		if c := classify(err); !named(pre, c.Name) {
			add(c)
		}
		return r
	}
	if len(pre) > 0 {
		// The sandbox was built all the same: the detections were wrong for
		// this runtime. Report them, but do not refuse on their account.
		for i := range r.Checks {
			if named(pre, r.Checks[i].Name) {
				r.Checks[i].OK = true
				r.Checks[i].Detail += " (but the sandbox was built: not needed here)"
			}
		}
	}
	defer h.Kill()
	add(Check{Name: "sandbox", OK: true, Detail: fmt.Sprintf("holder pid %d, id map %s (uid_map %s; gid_map %s), namespaces %s",
		h.PID, h.MapMode, h.UIDMap.Line(), h.GIDMap.Line(), strings.Join(h.Namespaces, " "))})

	u, err := idmap.Lookup("/", cfg.AgentUser)
	if err != nil {
		add(Check{Name: "agent user", Detail: err.Error(), Fix: "pass an --agent-user that exists in the image, or a bare uid"})
		return r
	}
	t := join.Target{PID: h.PID, Namespaces: h.Namespaces}
	// unshare(1) is the image's, when it has one: sandboxd itself needs
	// nothing but bwrap, so an image without util-linux is checked for the
	// rest and says so.
	probe := "test ! -w /proc/sys/kernel/core_pattern && test ! -e " + harness +
		" && if command -v unshare >/dev/null 2>&1; then ! unshare -U true 2>/dev/null && echo userns-refused; else echo userns-unchecked; fi"
	out, err := runJoined(t, u, probe)
	if err != nil {
		c := classify(fmt.Errorf("%v: %s", err, out))
		if c.Fix == "" {
			c = Check{Name: "join", Detail: c.Detail, Fix: "a session could not enter the sandbox with the session's options, or the sandbox is weaker than declared; see the detail"}
		}
		add(c)
		return r
	}
	userns := "nested user namespaces are refused"
	if strings.Contains(out, "userns-unchecked") {
		userns = "nested user namespaces not tried (the image has no unshare)"
	}
	add(Check{Name: "join", OK: true, Detail: fmt.Sprintf("a session as uid %d entered, /proc/sys is read-only, the harness is absent, %s", u.UID, userns)})
	c := networkRules(ctx, t)
	add(c)
	r.OK = c.OK
	return r
}

// networkRules installs, in the throwaway sandbox, the route and the
// nftables rules serve catches every outbound connection with: where the
// kernel or the runtime refuses them, serve refuses to start.
func networkRules(ctx context.Context, t join.Target) Check {
	plan := netrules.Plan{Catch: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), egress.CatchPort), DNS: egress.ResolverAddr}
	rules, err := netrules.Apply(ctx, t, plan)
	if err != nil {
		return Check{Name: "network rules", Detail: err.Error(),
			Fix: "the sandbox's outbound connections cannot be caught (nf_tables with NAT, reject and conntrack in a user namespace): use a kernel and runtime that allow them, or serve --allow-degraded for the explicit proxy alone"}
	}
	rules.Close()
	return Check{Name: "network rules", OK: true, Detail: "the default route through lo and the nftables rules that catch every outbound connection were installed"}
}

// doctorNoExec is the doctor that runs no program of the image: bwrap is
// looked up on PATH, never executed, and what can be read without it is
// reported.
func doctorNoExec(r Report, cfg Config) Report {
	r.Refused = cfg.NoExec
	r.Checks = append(r.Checks, hostChecks()...)
	r.Checks = append(r.Checks, preflight()...)
	r.Checks = append(r.Checks, newSyscalls())
	found := "not on PATH"
	if path, err := exec.LookPath(orDefault(cfg.Bwrap, "bwrap")); err == nil {
		found = path
	}
	r.Checks = append(r.Checks, Check{Name: "bubblewrap", Detail: fmt.Sprintf("%s, not run: %s", found, cfg.NoExec),
		Fix: "run doctor in a fresh container from the image, before serve starts there"})
	return r
}

func named(checks []Check, name string) bool {
	for _, c := range checks {
		if c.Name == name {
			return true
		}
	}
	return false
}

func runJoined(t join.Target, u idmap.User, script string) (string, error) {
	st, err := t.Command(join.Spec{User: u, Env: []string{"PATH=" + childproc.DefaultPath}, Dir: "/", Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	st.Cmd.Stdout, st.Cmd.Stderr = &out, &out
	if _, err := st.Start(); err != nil {
		st.Cmd.Wait()
		return out.String(), err
	}
	return out.String(), st.Cmd.Wait()
}

// classify turns a failed start into the check that names its fix.
func classify(err error) Check {
	msg := err.Error()
	for _, f := range runtimeFlags {
		for _, m := range f.matches {
			if strings.Contains(msg, m) {
				return Check{Name: f.name, Detail: msg, Fix: f.fix}
			}
		}
	}
	if errors.Is(err, bwrap.ErrDied) {
		return Check{Name: "sandbox", Detail: msg, Fix: "bwrap failed for a reason doctor does not know; docs/container-flags.md lists the runtime flags sandboxd needs"}
	}
	return Check{Name: "sandbox", Detail: msg}
}

// hostChecks reads conditions that would make bwrap fail in a way its own
// message does not explain.
func hostChecks() []Check {
	var out []Check
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		// Root in the container is not unprivileged for this check unless
		// the container has its own user namespace; report it, do not fail.
		out = append(out, Check{Name: "userns AppArmor restriction", OK: true,
			Detail: "kernel.apparmor_restrict_unprivileged_userns=1 on the host: if the sandbox then lacks capabilities, set it to 0 on the host (sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"})
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		out = append(out, Check{Name: "user namespaces", Detail: "user.max_user_namespaces is 0", Fix: "on the host: sysctl -w user.max_user_namespaces=15000"})
	}
	return out
}

// detectRuntime says what the process runs under, for the report.
func detectRuntime() string {
	if _, err := os.Stat("/.dockerenv"); err == nil {
		return "docker"
	}
	if _, err := os.Stat("/run/.containerenv"); err == nil {
		return "podman"
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return "kubernetes"
	}
	if b, err := os.ReadFile("/proc/1/cgroup"); err == nil && bytes.Contains(b, []byte("docker")) {
		return "docker"
	}
	return "host"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
