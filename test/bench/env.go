package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Debian packages the peers come from. Installed when missing, with their
// services stopped again at once (the benchmark starts its own instances).
var debianPackages = []string{"bubblewrap", "util-linux", "openssh-server", "openssh-client", "tinyproxy", "squid", "procps", "coreutils", "nftables"}

// machine is what the report says about where it ran.
type machine struct {
	date        time.Time
	nproc       int
	model       string
	memory      string
	kernel      string
	versions    [][2]string // tool, version
	loadBefore  string
	loadAfter   string
	commandLine string
}

func (b *bench) setup(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "sandboxd-bench-")
	if err != nil {
		return err
	}
	b.tmp = tmp
	// The servers that drop privileges (tinyproxy, squid) need to reach their
	// directories below it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	b.cleanup.Add("remove "+tmp, func() { os.RemoveAll(tmp) })
	if err := installMissing(ctx, b); err != nil {
		return err
	}
	b.machine = describeMachine(ctx, b.opt)
	b.logf("machine: %d cores, %s, kernel %s, load %s", b.machine.nproc, b.machine.model, b.machine.kernel, b.machine.loadBefore)
	return nil
}

func installMissing(ctx context.Context, b *bench) error {
	var missing []string
	for _, p := range debianPackages {
		out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	b.logf("installing from Debian: %s", strings.Join(missing, " "))
	if out, err := runCmd(ctx, "apt-get", "update", "-qq"); err != nil {
		b.logf("apt-get update reported errors; trying the install anyway: %s", out)
	}
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("install %s: %w: %s", strings.Join(missing, " "), err, out)
	}
	// Packages start their services; ours are started by the benchmark, on
	// ports of its own.
	for _, svc := range []string{"ssh", "tinyproxy", "squid"} {
		if err := exec.CommandContext(ctx, "service", svc, "stop").Run(); err != nil {
			exec.CommandContext(ctx, "systemctl", "stop", svc).Run()
		}
	}
	return nil
}

func describeMachine(ctx context.Context, o options) machine {
	m := machine{date: time.Now().UTC(), nproc: runtime.NumCPU(), loadBefore: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.model = strings.TrimSpace(v)
				break
			}
		}
	}
	if kb := kbField("/proc/meminfo", "MemTotal:"); kb > 0 {
		m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
	}
	m.kernel = firstLine(output(ctx, "uname", "-r"))
	pkg := func(name string) string {
		return firstLine(output(ctx, "dpkg-query", "-W", "-f=${Version}", name))
	}
	m.versions = [][2]string{
		{"sandboxd", strings.TrimPrefix(firstLine(output(ctx, o.sandboxd, "version")), "sandboxd ")},
		{"bubblewrap", firstLine(output(ctx, "bwrap", "--version")) + " (Debian " + pkg("bubblewrap") + ")"},
		{"OpenSSH sshd", "Debian " + pkg("openssh-server")},
		{"tinyproxy", "Debian " + pkg("tinyproxy")},
		{"squid", "Debian " + pkg("squid")},
		{"util-linux (nsenter, setpriv)", "Debian " + pkg("util-linux")},
		{"Docker engine", firstLine(output(ctx, "docker", "version", "--format", "{{.Server.Version}}"))},
		{"Go", runtime.Version()},
	}
	m.commandLine = strings.TrimSpace("go run ./test/bench " + strings.Join(os.Args[1:], " "))
	return m
}

func output(ctx context.Context, name string, args ...string) string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, name, args...).CombinedOutput()
	if err != nil {
		return "unavailable"
	}
	return strings.TrimSpace(string(out))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
