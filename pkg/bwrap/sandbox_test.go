package bwrap_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/procfs"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// harnessConfig is the configuration serve uses: a marked harness dir under
// /media that must be absent, /logs/verifier masked.
func harnessConfig(t *testing.T) (bwrap.Config, string) {
	harness := sandboxtest.HarnessDir(t)
	require.NoError(t, os.MkdirAll("/logs/verifier", 0o755))
	return bwrap.Config{Hide: []string{harness}, Mask: []string{"/logs/verifier"}}, harness
}

// The harness dir is absent, not empty; its siblings stay; /tests does not
// exist; /logs/verifier is an empty mask
// (docs/failures.md#harness-absent-not-empty).
func TestHarnessDirAbsentSiblingsKept(t *testing.T) {
	sandboxtest.SharedTests(t)
	cfg, harness := harnessConfig(t)
	sibling, err := os.MkdirTemp("/media", "sibling-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sibling) })
	require.NoError(t, os.WriteFile(filepath.Join(sibling, "kept"), []byte("yes"), 0o644))
	require.NoError(t, os.WriteFile("/logs/verifier/reward.txt", []byte("1"), 0o644))
	t.Cleanup(func() { os.Remove("/logs/verifier/reward.txt") })
	sb := sandboxtest.Start(t, cfg)

	r := sb.Sh(t, "0", fmt.Sprintf(`
		test -e %[1]s && echo harness-visible
		ls -a /media | grep -q '^%[2]s$' && echo harness-listed
		cat %[3]s/kept
		test -e /tests && echo tests-visible
		ls -A /logs/verifier | wc -l`, harness, filepath.Base(harness), sibling))
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "yes0\n", r.Stdout)
}

// A root agent can neither unmount nor mount over a mask, and cannot create
// a user namespace to get the capabilities to do so
// (docs/failures.md#root-agent-cannot-undo-the-masks).
func TestRootAgentCannotUndoMasks(t *testing.T) {
	cfg, harness := harnessConfig(t)
	sb := sandboxtest.Start(t, cfg)
	for _, script := range []string{
		"umount /logs/verifier",
		"umount -l /media",
		"mount -t tmpfs none /logs/verifier",
		"mount --bind /tmp /logs/verifier",
		"mount -t proc proc /mnt",
		"unshare -U true",
		"unshare -Ur true",
		"unshare -m true",
	} {
		r := sb.Sh(t, "0", script)
		assert.NotEqual(t, 0, r.Code, "%q succeeded as root in the sandbox", script)
	}
	r := sb.Sh(t, "0", "grep -c ' /logs/verifier ' /proc/self/mountinfo; test -e "+harness+" || echo absent")
	assert.Equal(t, "1\nabsent\n", r.Stdout, "the masks are still in place")
}

// Docker's read-only and masked /proc paths, and a read-only /sys
// (docs/failures.md#kernel-settings-stay-read-only).
func TestProcSysAndSysReadOnly(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	for _, path := range []string{"/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/sys/kernel/uevent_helper", "/proc/sys/vm/drop_caches"} {
		r := sb.Sh(t, "0", "test -w "+path)
		assert.NotEqual(t, 0, r.Code, "%s is writable for the agent's root", path)
	}
	r := sb.Sh(t, "0", "cat /proc/kcore 2>/dev/null | head -c 1 | wc -c; ls /proc/acpi 2>/dev/null | wc -l")
	assert.Equal(t, "0\n0\n", r.Stdout)
}

// Sessions run with Docker's default set less NET_RAW
// (docs/failures.md#no-raw-or-admin-network-capabilities,
// docs/failures.md#root-agent-cannot-undo-the-masks).
func TestSessionCapabilitiesAreBounded(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Sh(t, "0", "grep -E '^Cap(Eff|Bnd)' /proc/self/status")
	require.Equal(t, 0, r.Code, r.Stderr)
	// Docker's default set (0xa80425fb) without CAP_NET_RAW (bit 13).
	want := fmt.Sprintf("%016x", uint64(0xa80425fb)&^(1<<13))
	assert.Equal(t, "CapEff:\t"+want+"\nCapBnd:\t"+want+"\n", r.Stdout)
}

// A file owned by uid 1000 shows uid 1000 inside; uid 1000 can write it and
// uid 1001 cannot
// (docs/failures.md#identity-map-copies-the-extents-of-the-container).
func TestFileOwnershipThroughIdentityMap(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	f := filepath.Join(dir, "owned")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	require.NoError(t, os.Chown(f, 1000, 1000))
	sb := sandboxtest.Start(t, bwrap.Config{Workdir: dir})
	r := sb.Sh(t, "0", "stat -c %u:%g "+f)
	assert.Equal(t, "1000:1000\n", r.Stdout)
	assert.Equal(t, 0, sb.Sh(t, "1000:1000", "echo y >> "+f).Code)
	assert.NotEqual(t, 0, sb.Sh(t, "1001:1001", "echo z >> "+f).Code)
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	assert.Equal(t, "xy\n", string(b), "the agent's writes are real and the substrate sees them")
}

// Nothing inside names the harness: pid 1's command line and environment,
// mount sources, a session's environment
// (docs/failures.md#nothing-inside-names-the-harness).
func TestNothingInsideNamesTheHarness(t *testing.T) {
	cfg, harness := harnessConfig(t)
	cfg.Files = []bwrap.DataFile{{Path: "/etc/hosts", Data: []byte("127.0.0.1 localhost\n")}}
	sb := sandboxtest.Start(t, cfg)
	r := sb.Sh(t, "0", "tr '\\0' ' ' </proc/1/cmdline; echo; tr '\\0' '\\n' </proc/1/environ 2>&1; env; ls -la /proc/1/fd/ 2>&1; ( exec 9</proc/1/mem ) 2>/dev/null || echo pid1-guarded")
	require.Equal(t, 0, r.Code, r.Stderr)
	for _, word := range []string{harness, "sandboxd", filepath.Base(harness), "--args", "bwrap", "memfd"} {
		assert.NotContains(t, r.Stdout, word)
	}
	assert.True(t, strings.HasPrefix(r.Stdout, "/bin/sh -c "), "pid 1 is a plain shell: %s", r.Stdout)
	// pid 1 holds a capability sessions lack, so the agent's root can
	// neither read its environment and descriptors nor write its memory.
	assert.Contains(t, r.Stdout, "pid1-guarded")
	assert.Contains(t, r.Stdout, "Permission denied")
	// Mount sources: the substrate's own mounts show as they are, but none of
	// the sandbox's mounts names the harness.
	r = sb.Sh(t, "0", "cat /proc/self/mountinfo")
	assert.NotContains(t, r.Stdout, harness)
	assert.NotContains(t, r.Stdout, filepath.Base(harness))
}

// One sandbox per rollout: a background process survives its command
// (docs/failures.md#background-processes-outlive-their-command).
func TestBackgroundProcessSurvivesItsCommand(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	r := sb.Sh(t, "0", "nohup sleep 300 >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
	require.Equal(t, 0, r.Code)
	r = sb.Sh(t, "0", "kill -0 $(cat /tmp/bg.pid) && echo alive")
	assert.Equal(t, "alive\n", r.Stdout)
}

// A root agent's `kill -9 -1` leaves the sandbox standing: pid 1 is a
// namespace init with no handlers.
func TestKillAllLeavesSandboxStanding(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	sb.Sh(t, "0", "sleep 100 & kill -9 -1")
	r := sb.Sh(t, "0", "echo still-here")
	assert.Equal(t, "still-here\n", r.Stdout)
	select {
	case <-sb.Holder.Done():
		t.Fatal("the holder died")
	default:
	}
}

// The holder outlives the goroutine (and thread) that started it
// (docs/failures.md#holder-outlives-its-starting-thread).
func TestHolderOutlivesStartingThread(t *testing.T) {
	sandboxtest.RequireRoot(t)
	var h *bwrap.Holder
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread() // exits with the goroutine: its thread is retired
		h, err = bwrap.Start(context.Background(), bwrap.Config{Workdir: "/"})
	}()
	wg.Wait()
	require.NoError(t, err)
	defer h.Kill()
	// Churn threads so the runtime retires some.
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); runtime.LockOSThread(); time.Sleep(time.Millisecond) }()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-h.Done():
		t.Fatal("the holder died with the thread that forked it")
	default:
	}
	assert.NoError(t, unix.Kill(h.PID, 0))
}

// A failed start leaves no process behind
// (docs/failures.md#failed-start-leaves-no-holder).
func TestFailedStartLeavesNothing(t *testing.T) {
	sandboxtest.RequireRoot(t)
	dir := t.TempDir()
	fake := filepath.Join(dir, "bwrap")
	// A bwrap that reports a version and dies before writing --info-fd.
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n[ \"$1\" = --version ] && { echo bubblewrap 0.8.0; exit 0; }\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n"), 0o755))
	before := countChildren()
	_, err := bwrap.Start(context.Background(), bwrap.Config{Bwrap: fake, Workdir: "/"})
	require.Error(t, err)
	assert.ErrorIs(t, err, bwrap.ErrDied)
	assert.Contains(t, err.Error(), "Creating new namespace failed", "bwrap's own words reach the operator")
	assert.Equal(t, before, countChildren())

	_, err = bwrap.Start(context.Background(), bwrap.Config{Bwrap: filepath.Join(dir, "missing"), Workdir: "/"})
	assert.ErrorIs(t, err, bwrap.ErrNotFound)
	assert.Contains(t, err.Error(), "install the bubblewrap package")

	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho bubblewrap 0.3.3\n"), 0o755))
	_, err = bwrap.Start(context.Background(), bwrap.Config{Bwrap: fake, Workdir: "/"})
	assert.ErrorIs(t, err, bwrap.ErrTooOld)

	_, err = bwrap.Start(context.Background(), bwrap.Config{Workdir: "/no/such/dir"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--workdir")
}

// An id map the kernel refuses kills the holder; with --allow-degraded a
// single-id map is used and said (docs/failures.md#failed-start-leaves-no-holder,
// docs/failures.md#identity-map-includes-the-ids-bwrap-runs-as).
func TestRefusedIDMapKillsHolder(t *testing.T) {
	sandboxtest.RequireRoot(t)
	restore := bwrap.SetMapsForTest(func(pid int) error {
		return fmt.Errorf("write /proc/%d/uid_map: %w", pid, errors.New("operation not permitted (simulated refusal)"))
	})
	defer restore()
	before := countChildren()
	_, err := bwrap.Start(context.Background(), bwrap.Config{Workdir: "/"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--allow-degraded")
	assert.Equal(t, before, countChildren(), "the spawned bwrap was killed")

	h, err := bwrap.Start(context.Background(), bwrap.Config{Workdir: "/", AllowDegraded: true})
	require.NoError(t, err)
	defer h.Kill()
	assert.Equal(t, "single-id", h.MapMode)
	require.Len(t, h.Degradations, 1)
	m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", h.PID))
	assert.Equal(t, "0 0 1", strings.Join(strings.Fields(string(m)), " "))
}

// countChildren counts this process's live children.
func countChildren() int {
	n := 0
	for _, pid := range procfs.PIDs() {
		if st, err := procfs.ReadStat(pid); err == nil && st.PPID == os.Getpid() && st.State != 'Z' {
			n++
		}
	}
	return n
}

// A data file whose path does not exist is never created in the shared
// filesystem: its directory is rebuilt in the sandbox's view only.
func TestDataFileNeverWrittenIntoSharedFilesystem(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "existing.conf"), []byte("kept\n"), 0o644))
	sb := sandboxtest.Start(t, bwrap.Config{Files: []bwrap.DataFile{{Path: filepath.Join(dir, "added.conf"), Data: []byte("only inside\n"), ReadOnly: true}}})
	r := sb.Sh(t, "0", "cat "+filepath.Join(dir, "added.conf")+" "+filepath.Join(dir, "existing.conf"))
	require.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "only inside\nkept\n", r.Stdout)
	_, err := os.Lstat(filepath.Join(dir, "added.conf"))
	assert.True(t, os.IsNotExist(err), "the file exists in the substrate")
}

// A data file stands in for a file every user reads (/etc/hosts with the
// peers): a non-root agent can read it, so it can resolve localhost and the
// peers' names. bwrap makes data files 0600 root unless told otherwise.
func TestDataFilesAreReadableByEveryUser(t *testing.T) {
	// A directory every user may enter (t.TempDir's parent is 0700).
	dir, err := os.MkdirTemp("/tmp", "sandboxd-datafile-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	sb := sandboxtest.Start(t, bwrap.Config{Files: []bwrap.DataFile{
		{Path: "/etc/hosts", Data: []byte("127.0.0.1 localhost\n127.0.0.2 db\n")},
		{Path: filepath.Join(dir, "ro.conf"), Data: []byte("read only\n"), ReadOnly: true},
	}})
	r := sb.Sh(t, "1000:1000", "getent hosts db localhost && cat /etc/hosts")
	require.Equal(t, 0, r.Code, "a non-root agent cannot read the sandbox's hosts file: %s", r.Stderr)
	assert.Contains(t, r.Stdout, "db")
	if bwrap.NewArgs(sb.Holder.Version).Has("--perms") {
		r = sb.Sh(t, "1000:1000", "cat "+filepath.Join(dir, "ro.conf"))
		assert.Equal(t, 0, r.Code, "a read-only data file is not readable: %s", r.Stderr)
	}
}

// Pid1Exited tells a live pid 1 from one that has exited, on the holder's
// pidfd, and gives up (ok false) once Kill has closed it.
func TestPid1ExitedFollowsThePidfd(t *testing.T) {
	sandboxtest.RequireRoot(t)
	h, err := bwrap.Start(context.Background(), bwrap.Config{Workdir: "/"})
	require.NoError(t, err)
	defer h.Kill()
	exited, ok := h.Pid1Exited()
	require.True(t, ok)
	assert.False(t, exited, "pid 1 is running")
	require.NoError(t, unix.Kill(h.PID, unix.SIGKILL))
	require.Eventually(t, func() bool {
		exited, ok := h.Pid1Exited()
		return ok && exited
	}, 10*time.Second, 10*time.Millisecond, "pid 1 was killed")
	h.Kill()
	_, ok = h.Pid1Exited()
	assert.False(t, ok, "the pidfd is closed after Kill")
}
