package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moby/profiles/seccomp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const committed = "../seccomp.json"

// The committed profile is byte for byte what the generator derives from the
// default of the module version go.mod requires: an edit by hand, a changed
// addition or a new upstream version without `make seccomp` fails here.
func TestCommittedProfileIsTheDerivation(t *testing.T) {
	prof, err := Derive()
	require.NoError(t, err)
	want, err := Render(prof)
	require.NoError(t, err)
	have, err := os.ReadFile(committed)
	require.NoError(t, err)
	if !bytes.Equal(have, want) {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(hl) && i < len(wl) && hl[i] == wl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return strings.TrimSpace(l[i])
			}
			return "(end of file)"
		}
		t.Fatalf("images/seccomp.json is not the profile derived from %s: run make seccomp and commit the result.\n"+
			"first difference at line %d: the file has %q, the derivation %q", upstreamVersion(), i+1, line(hl), line(wl))
	}
}

func TestRenderIsStable(t *testing.T) {
	a, err := Derive()
	require.NoError(t, err)
	b, err := Derive()
	require.NoError(t, err)
	ra, _ := Render(a)
	rb, _ := Render(b)
	require.Equal(t, string(ra), string(rb))
	// What Render writes, Parse reads back to the same text.
	p, err := Parse(ra)
	require.NoError(t, err)
	rp, _ := Render(p)
	require.Equal(t, string(ra), string(rp))
	for _, e := range a.Syscalls {
		assert.True(t, slices.IsSorted(e.Names), "%v", e.Names)
	}
}

// The calls current engines and C libraries use, which the profile derived
// from Docker 20.10's default denied. Some of them (mseal, statmount,
// listmount, the *xattrat calls, uretprobe) an engine built with libseccomp
// 2.5 drops whatever the profile says, so they are checked here, in the file,
// and not at run time.
var currentCalls = []string{
	"cachestat", "fchmodat2", "futex_requeue", "futex_wait", "futex_wake", "futex_waitv",
	"getxattrat", "listmount", "listxattrat", "map_shadow_stack", "mseal",
	"removexattrat", "setxattrat", "statmount", "uretprobe",
}

func TestProfileAllowsCurrentCalls(t *testing.T) {
	prof, err := Parse(mustRead(t, committed))
	require.NoError(t, err)
	for _, arch := range []string{"amd64", "arm64"} {
		rules := Rules(prof, DockerCaps, arch)
		for _, n := range currentCalls {
			assert.Equal(t, []string{"SCMP_ACT_ALLOW"}, rules[n], "%s on %s", n, arch)
		}
	}
	old, err := Parse(mustRead(t, "testdata/seccomp-docker-20.10.json"))
	require.NoError(t, err)
	rules := Rules(old, DockerCaps, "amd64")
	for _, n := range currentCalls {
		if n == "futex_waitv" { // Debian's 20.10.24 already had it
			continue
		}
		assert.Empty(t, rules[n], "the Docker 20.10 profile had %s", n)
	}
}

// What the sandbox does not need stays denied, as the default has it.
func TestProfileKeepsTheDefaultsDenials(t *testing.T) {
	prof, err := Parse(mustRead(t, committed))
	require.NoError(t, err)
	rules := Rules(prof, DockerCaps, "amd64")
	for _, n := range []string{
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
		"sethostname", "setdomainname", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
		"kexec_load", "init_module", "open_by_handle_at", "umount", "io_uring_setup",
	} {
		assert.Empty(t, rules[n], "%s", n)
	}
	assert.Equal(t, []string{"SCMP_ACT_ERRNO(38)"}, rules["clone3"], "clone3 keeps the default's ENOSYS")
	for _, n := range Added() {
		assert.Equal(t, []string{"SCMP_ACT_ALLOW"}, rules[n], "%s", n)
	}
}

// Check refuses a profile that differs from the default by anything but the
// additions, so that no hand edit slips into the generator.
func TestCheckRefusesOtherChanges(t *testing.T) {
	def := seccomp.DefaultProfile()
	good, err := Derive()
	require.NoError(t, err)
	require.NoError(t, Check(def, good))
	for name, edit := range map[string]func(p *seccomp.Seccomp){
		"an extra name": func(p *seccomp.Seccomp) {
			e := find(t, p, "setns")
			e.Names = append(e.Names, "bpf")
		},
		"an addition gone": func(p *seccomp.Seccomp) {
			e := find(t, p, "pivot_root")
			e.Names = []string{"chroot"}
		},
		"a default name gone": func(p *seccomp.Seccomp) {
			e := find(t, p, "fchmodat2")
			e.Names = slices.DeleteFunc(e.Names, func(n string) bool { return n == "fchmodat2" })
		},
		"an addition with conditions": func(p *seccomp.Seccomp) {
			e := find(t, p, "setns")
			e.Args = find(t, p, "personality").Args
		},
		"another default action": func(p *seccomp.Seccomp) { p.DefaultAction = "SCMP_ACT_LOG" },
	} {
		p, err := Parse(mustRender(t, good))
		require.NoError(t, err)
		edit(p)
		assert.Error(t, Check(def, p), name)
	}
}

func TestDeriveRefusesAnUnknownShape(t *testing.T) {
	def := seccomp.DefaultProfile()
	for _, e := range def.Syscalls {
		if e.Includes != nil && slices.Equal(e.Includes.Caps, []string{"CAP_SYS_ADMIN"}) {
			e.Includes.Caps = []string{"CAP_SYS_RESOURCE"}
		}
	}
	_, err := derive(def)
	assert.ErrorContains(t, err, "CAP_SYS_ADMIN group")
}

func find(t *testing.T, p *seccomp.Seccomp, name string) *seccomp.Syscall {
	for _, e := range p.Syscalls {
		if slices.Contains(e.Names, name) {
			return e
		}
	}
	t.Fatalf("no rule names %s", name)
	return nil
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func mustRender(t *testing.T, p *seccomp.Seccomp) []byte {
	b, err := Render(p)
	require.NoError(t, err)
	return b
}
