// Package masks is what every view of the container's filesystem leaves
// out or makes read-only: the sandbox's (pkg/bwrap) and a visitor's
// (pkg/visit) apply the same lists, so that grading needs nothing of bwrap's.
package masks

import (
	"io/fs"
	"os"
	"path/filepath"
)

// HarnessMarker is the file that marks a directory as a sandboxd harness dir.
// Every marked directory is absent from every sandbox and masked in every
// visitor's view, so that two trials on one machine never see each other's
// harness.
const HarnessMarker = ".sandboxd-harness"

// Docker's masked and read-only paths (moby's oci defaults) plus a
// read-only /sys. The identity map makes the agent's root the container's
// root, so a writable /proc/sys/kernel/core_pattern would be a host escape
// (docs/failures.md#kernel-settings-stay-read-only). Sysctl entries are
// looked up in the reader's namespaces, so the substrate's /proc/sys shows
// the sandbox's own network and uts values.
var (
	// Masked are covered: a directory by an empty read-only tmpfs, a
	// file by /dev/null.
	Masked = []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	// ReadOnly are bound read-only onto themselves, with all below them.
	ReadOnly = []string{"/sys", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// hostSocketDirs are where a bare host keeps the sockets that would hand the
// agent the machine (docs/failures.md#host-mode-masks-the-host).
var hostSocketDirs = []string{"/run", "/var/run", "/run/containerd", "/run/docker", "/run/user"}

// HostSockets lists the unix sockets a bare host keeps in its run dirs, each
// once, by the first name found: the sandbox masks them in host mode, and so
// must a visitor's view.
func HostSockets() []string {
	seen := map[string]bool{}
	var out []string
	for _, dir := range hostSocketDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			full := filepath.Join(dir, e.Name())
			real, err := filepath.EvalSymlinks(full)
			if err != nil || seen[real] {
				continue
			}
			if st, err := os.Lstat(full); err == nil && st.Mode()&fs.ModeSocket != 0 {
				seen[real] = true
				out = append(out, full)
			}
		}
	}
	return out
}
