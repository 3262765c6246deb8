package attack

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/control"
)

// harnessFiles are the ways to the grading material and the harness's own
// state: by path, through other processes' views in /proc, through mount
// tables and devices, by searching, and by the kernel's back doors.
var harnessFiles = []attempt{
	{name: "list /tests", sh: `test -n "$(ls -A /tests 2>/dev/null)"`},
	{name: "read /tests/test.sh and the tests' files", sh: `cat /tests/test.sh /tests/secret.txt`},
	{name: "list /logs/verifier", sh: `test -n "$(ls -A /logs/verifier 2>/dev/null)"`},
	{name: "list the harness dir by path", sh: `ls -la {H}`},
	{name: "stat the harness dir", sh: `test -e {H}`},
	{name: "read the task's tests by path", sh: `cat {H}/tasks/{TASK}/tests/secret.txt`},
	{name: "read the solution by path", sh: `cat {H}/tasks/{TASK}/solution/solve.sh`},
	{name: "read the SSH host key", sh: `cat {H}/keys/host_ed25519`},
	{name: "read the generated agent key", sh: `cat {H}/keys/*`},
	{name: "connect to the control socket", sh: `{PY} unix {H}/run/control.sock`},
	{name: "read the serve lock", sh: `cat {H}/run/serve.lock`},
	{name: "read the egress audit log", sh: `cat {H}/audit/*`},
	{name: "list the session records", sh: `ls -la {H}/records`},
	{name: "list the grading scratch", sh: `ls -la {H}/grade`},
	{name: "walk /proc/*/root to the harness dir", sh: `for p in /proc/[0-9]*; do ls "$p/root{H}" 2>/dev/null && exit 0; cat "$p/root{H}/tasks/{TASK}/tests/secret.txt" 2>/dev/null && exit 0; done; exit 1`},
	{name: "walk /proc/*/cwd", sh: `for p in /proc/[0-9]*; do ls -la "$p/cwd/" "$p/cwd/.." 2>&1; done`, check: noLeak},
	{name: "walk /proc/*/root/media", sh: `for p in /proc/[0-9]*; do ls -la "$p/root/media/" 2>&1; done`, check: noLeak},
	{name: "read /proc/1 (cmdline, environ, mounts, status, maps, fds, cwd, root, exe)", sh: `for f in cmdline environ mountinfo mounts status maps; do cat /proc/1/$f 2>&1 | tr '\0' ' '; done; ls -la /proc/1/ /proc/1/fd/ /proc/1/cwd/ /proc/1/root/ /proc/1/root/media/ 2>&1; readlink /proc/1/exe /proc/1/cwd /proc/1/root 2>&1`, check: noLeak},
	{name: "read every mount table", sh: `cat /proc/[0-9]*/mountinfo /proc/[0-9]*/mounts /proc/self/mountstats 2>&1`, check: noLeak},
	{name: "list /dev recursively", sh: `ls -laR /dev 2>&1`, check: noLeak},
	{name: "find a block device", sh: `find /dev -type b 2>/dev/null | grep .`},
	{name: "read raw disks and kernel memory", sh: `for d in /dev/mem /dev/kmem /dev/port /dev/vda /dev/sda /dev/nvme0n1 /dev/xvda /proc/kcore; do test -r $d && test "$(timeout 2 head -c 64 $d 2>/dev/null | wc -c)" -gt 0 && { echo read $d; exit 0; }; done; exit 1`},
	{name: "make a block device node for the root disk", sh: `mknod {WD}/disk b 254 0 && test "$(head -c 512 {WD}/disk | wc -c)" -gt 0`},
	// Every filesystem of the sandbox's view but /proc and /sys: the root
	// (without other containers' overlays under /var/lib/docker, which are
	// mounts of their own) and each tmpfs the sandbox has.
	{name: "search the filesystem for the task's and harness's names", sh: `find / /media /logs /tests /dev /tmp /run -xdev \( -name '*{TASK}*' -o -name "$(basename {H})" \) -print 2>/dev/null | grep .`},
	{name: "grep the writable places for the tests' secret", sh: `find /tmp /var/tmp /dev/shm /run /media /logs /tests /opt /srv /mnt -xdev -type f -size -4M 2>/dev/null | xargs -r grep -sl -- {SECRET} 2>/dev/null | grep .`},
	{name: "open_by_handle_at (the shocker escape)", sh: `{PY} handle`},
	{name: "break out of a chroot and look for the harness dir", sh: `cd {WD} && {PY} chroot-break {H}`},
	{name: "connect to the host's docker and containerd sockets", sh: `for s in /run/docker.sock /var/run/docker.sock /run/containerd/containerd.sock /run/dbus/system_bus_socket /run/systemd/private; do {PY} unix $s && exit 0; done; exit 1`},
	{name: "join a network namespace of the host (docker's, ip netns')", sh: `for f in /run/docker/netns/* /var/run/netns/* /run/netns/*; do test -e "$f" && {PY} setns "$f" && exit 0; done; exit 1`},
}

// harnessProcess are the ways to the harness's environment and arguments.
var harnessProcess = []attempt{
	{name: "read every visible environment", sh: `for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>&1; done`, check: noLeak},
	{name: "read every visible command line", sh: `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>&1; echo; done`, check: noLeak},
	{name: "read the session's own environment", sh: `env; tr '\0' '\n' < /proc/self/environ`, check: noLeak},
	{name: "read every visible exe, fd and map", sh: `for p in /proc/[0-9]*; do readlink $p/exe; ls -l $p/fd/ 2>&1; cat $p/maps 2>&1 | awk '{print $6}' | sort -u; done`, check: noLeak},
	{name: "read /proc/kmsg", sh: `test "$(timeout 2 head -c 256 /proc/kmsg 2>/dev/null | wc -c)" -gt 0`},
	// dmesg itself is the host's to allow (kernel.dmesg_restrict): it must
	// not carry the harness.
	{name: "read the kernel's log for the harness", sh: `timeout 5 dmesg 2>&1 | tail -2000`, check: noLeak},
}

func TestEscape_HarnessFiles(t *testing.T) {
	requireTools(t, "/usr/bin/python3", "find", "grep")
	forAgents(t, rolloutOptions{}, func(t *testing.T, agent string, r *rollout) {
		r.try(t, agent, harnessFiles, nil)
	})
}

func TestEscape_HarnessProcess(t *testing.T) {
	requireTools(t, "/usr/bin/python3")
	forAgents(t, rolloutOptions{}, func(t *testing.T, agent string, r *rollout) {
		r.try(t, agent, harnessProcess, nil)

		// While sessions start, an agent process polls /proc for what the
		// enter step, nsenter and the helpers expose in passing.
		watch := `end=$(($(date +%s)+4)); while [ $(date +%s) -lt $end ]; do for p in /proc/[0-9]*; do
  tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; tr '\0' '\n' < $p/environ 2>/dev/null; readlink $p/exe $p/cwd $p/root 2>/dev/null; ls -l $p/fd/ 2>/dev/null
done; done > {WD}/watch.log 2>&1; wc -c < {WD}/watch.log`
		var wg sync.WaitGroup
		wg.Add(1)
		var watched result
		go func() { defer wg.Done(); watched = r.sh(r.expand(watch, nil)) }()
		time.Sleep(300 * time.Millisecond)
		var starts sync.WaitGroup
		for i := 0; i < 24; i++ {
			starts.Add(1)
			go func(i int) {
				defer starts.Done()
				req := control.Request{Argv: []string{"/bin/true"}}
				if i%2 == 1 {
					req.TTY = true
				}
				r.exec(req, 30*time.Second)
			}(i)
		}
		starts.Wait()
		wg.Wait()
		require.NoError(t, watched.err)
		log, err := os.ReadFile(r.workdir + "/watch.log")
		require.NoError(t, err)
		leaked := r.leaks(string(log))
		var lines []string
		for _, line := range strings.Split(string(log), "\n") {
			if len(r.leaks(line)) > 0 && len(lines) < 5 {
				lines = append(lines, line)
			}
		}
		record(t, "watch /proc while 24 sessions start", len(leaked) == 0, fmt.Sprintf("leaked %v in %d bytes:\n%s", leaked, len(log), strings.Join(lines, "\n")))
	})
}

// keyringAttempts plants a key in the daemon's user keyring and asks the
// sandbox for it and for the daemon's session keyring.
func TestEscape_Keyrings(t *testing.T) {
	requireTools(t, "/usr/bin/python3")
	desc := "sandboxd-attack-" + randomHex(6)
	payload := "KEYRING-SECRET-" + randomHex(12)
	id, err := unix.AddKey("user", desc, []byte(payload), unix.KEY_SPEC_USER_KEYRING)
	if inContainerRun && errors.Is(err, unix.EPERM) {
		// Docker's seccomp profile (images/seccomp.json keeps its rule)
		// refuses add_key, keyctl and request_key to every process of the
		// container: the daemon has no keyring to plant a key in or to
		// share. The agent meets the same filter, or the sandbox lifted it.
		forAgents(t, rolloutOptions{}, func(t *testing.T, agent string, r *rollout) {
			r.try(t, agent, []attempt{
				{name: "read a key of the daemon's user keyring", sh: `{PY} keyread ` + desc},
				{name: "list /proc/keys and /proc/key-users", sh: `cat /proc/keys /proc/key-users 2>&1`, check: noLeak},
				{name: "reach any keyring at all (the container's filter refuses keyctl)", sh: `{PY} anykeyring`},
			}, nil)
		})
		return
	}
	require.NoError(t, err)
	unix.KeyctlInt(unix.KEYCTL_SET_TIMEOUT, id, 300, 0, 0)
	t.Cleanup(func() { unix.KeyctlInt(unix.KEYCTL_UNLINK, id, unix.KEY_SPEC_USER_KEYRING, 0, 0) })
	session, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	require.NoError(t, err)
	forAgents(t, rolloutOptions{}, func(t *testing.T, agent string, r *rollout) {
		r.secrets["keyring payload"] = payload
		attempts := []attempt{
			{name: "read a key of the daemon's user keyring", sh: `{PY} keyread ` + desc},
			{name: "list /proc/keys and /proc/key-users", sh: `cat /proc/keys /proc/key-users 2>&1`, check: noLeak},
		}
		// Whether a session inherits the session keyring depends on the
		// daemon thread that started it: try from several sessions.
		for i := 1; i <= 8; i++ {
			attempts = append(attempts, attempt{name: fmt.Sprintf("share the daemon's session keyring (session %d)", i), sh: fmt.Sprintf(`{PY} keyring %d`, session)})
		}
		r.try(t, agent, attempts, nil)
	})
}

// escalation are the ways to more privilege than the sandbox grants.
var escalation = []attempt{
	{name: "unshare a user namespace (unshare -U)", sh: `unshare -U true`},
	{name: "unshare a user namespace (raw syscall)", sh: `{PY} unshare 0x10000000`},
	{name: "unshare a mount namespace", sh: `{PY} unshare 0x20000`},
	{name: "unshare a network namespace", sh: `{PY} unshare 0x40000000`},
	{name: "unshare a pid namespace", sh: `{PY} unshare 0x20000000`},
	{name: "unshare a cgroup namespace", sh: `{PY} unshare 0x02000000`},
	{name: "unshare a time namespace", sh: `{PY} unshare 0x80`},
	{name: "mount a tmpfs", sh: `mkdir -p {WD}/m && {PY} mount tmpfs {WD}/m tmpfs 0`},
	{name: "bind-mount / elsewhere", sh: `mkdir -p {WD}/m && {PY} mount / {WD}/m none 0x5000`},
	{name: "mount a fresh proc", sh: `mkdir -p {WD}/p && {PY} mount proc {WD}/p proc 0`},
	{name: "unmount the /logs/verifier mask", sh: `{PY} umount /logs/verifier`},
	{name: "unmount the /tests mask", sh: `{PY} umount /tests`},
	{name: "unmount /media (uncover the harness dir)", sh: `{PY} umount /media`},
	{name: "unmount the read-only /proc/sys", sh: `{PY} umount /proc/sys`},
	{name: "remount /proc/sys read-write", sh: `{PY} mount none /proc/sys none 0x20`},
	{name: "remount /sys read-write", sh: `{PY} mount none /sys none 0x20`},
	{name: "use the setuid mount(8) as the agent user", sh: `mkdir -p {WD}/m && /usr/bin/mount -t tmpfs x {WD}/m`, skipFor: "root"},
	{name: "run a setuid-root binary planted outside", sh: `{SUID} -u | grep -qx 0`, skipFor: "root"},
	{name: "run a binary with file capabilities planted outside", sh: `{FCAP} /proc/self/status | awk '/^CapEff/ {print $2}' | grep -qv '^0*$'`, skipFor: "root"},
	{name: "hold a forbidden capability (SYS_ADMIN, NET_ADMIN, NET_RAW, SYS_PTRACE, SYS_MODULE, DAC_READ_SEARCH, SYS_RAWIO, SYSLOG, BPF, PERFMON, SYS_TIME, SYS_BOOT, MAC_ADMIN)",
		sh: `grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status`, check: forbiddenCaps},
	{name: "ptrace the daemon (a process outside)", sh: `{PY} ptrace {DAEMON}`},
	{name: "ptrace the holder by its outside pid", sh: `{PY} ptrace {HOLDER}`},
	{name: "read the daemon's memory (process_vm_readv)", sh: `{PY} vmread {DAEMON}`},
	{name: "open the daemon's /proc/PID/mem", sh: `{PY} memwrite {DAEMON}`},
	{name: "add a network interface", sh: `ip link add sbxdummy0 type dummy`},
	{name: "add an address to lo", sh: `ip addr add 10.213.77.9/32 dev lo`},
	{name: "take lo down (and the proxy with it)", sh: `ip link set lo down`},
	{name: "add a route", sh: `ip route add 10.213.77.0/29 dev lo`},
	{name: "set privileged socket options (SO_MARK)", sh: `{PY} sockopt`},
	{name: "write a sysctl (test -w only)", sh: `for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sys/kernel/sysrq /proc/sys/kernel/panic /proc/sys/vm/drop_caches /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv4/conf/all/forwarding /proc/sys/fs/binfmt_misc/register /proc/sys/kernel/yama/ptrace_scope /proc/sys/user/max_user_namespaces /proc/sysrq-trigger; do test -w $f && { echo writable: $f; exit 0; }; done; exit 1`},
	{name: "write /sys and the cgroup tree (test -w only)", sh: `for f in /sys/kernel/uevent_helper /sys/fs/cgroup/memory/release_agent /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/pids/tasks /sys/fs/cgroup/memory/tasks /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs /sys/power/state /sys/class/net/lo/mtu; do test -w $f && { echo writable: $f; exit 0; }; done; exit 1`},
	{name: "load a kernel module (finit_module)", sh: `{PY} module`},
}

func forbiddenCaps(x result) string {
	forbidden := map[int]string{21: "SYS_ADMIN", 12: "NET_ADMIN", 13: "NET_RAW", 19: "SYS_PTRACE", 16: "SYS_MODULE", 2: "DAC_READ_SEARCH", 17: "SYS_RAWIO", 34: "SYSLOG", 39: "BPF", 38: "PERFMON", 25: "SYS_TIME", 22: "SYS_BOOT", 33: "MAC_ADMIN"}
	var found []string
	for _, line := range strings.Split(x.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		var mask uint64
		fmt.Sscanf(f[1], "%x", &mask)
		for bit, name := range forbidden {
			if mask&(1<<bit) != 0 {
				found = append(found, f[0]+" "+name)
			}
		}
	}
	if x.code != 0 || len(found) == 0 && !strings.Contains(x.stdout, "CapBnd") {
		return "could not read the capability sets"
	}
	if len(found) > 0 {
		return "holds " + strings.Join(found, ", ")
	}
	return ""
}

func TestEscape_Escalate(t *testing.T) {
	requireTools(t, "/usr/bin/python3", "unshare", "ip", "/usr/bin/mount")
	// Planted by the harness side, on the root filesystem (where setuid and
	// file capabilities would count): a setuid-root id and a cat that
	// carries CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH and CAP_NET_ADMIN.
	dir, err := os.MkdirTemp("", "sandboxd-attack-suid-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	suid, fcap := dir+"/suid-id", dir+"/fcap-cat"
	copyFile(t, "/usr/bin/id", suid, 0o4755)
	copyFile(t, "/bin/cat", fcap, 0o755)
	require.NoError(t, unix.Setxattr(fcap, "security.capability", fileCaps(21, 2, 12), 0))
	forAgents(t, rolloutOptions{}, func(t *testing.T, agent string, r *rollout) {
		r.try(t, agent, escalation, map[string]string{"SUID": suid, "FCAP": fcap, "DAEMON": fmt.Sprint(os.Getpid())})
	})
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o700))
	require.NoError(t, os.Chown(to, 0, 0))
	require.NoError(t, os.Chmod(to, mode))
}

// fileCaps is a VFS_CAP_REVISION_2 security.capability value granting caps
// in the permitted set, effective.
func fileCaps(caps ...int) []byte {
	var lo, hi uint32
	for _, c := range caps {
		if c < 32 {
			lo |= 1 << c
		} else {
			hi |= 1 << (c - 32)
		}
	}
	b := make([]byte, 20)
	put := func(off int, v uint32) {
		b[off], b[off+1], b[off+2], b[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	put(0, 0x02000000|0x000001) // revision 2, effective
	put(4, lo)
	put(12, hi)
	return b
}
