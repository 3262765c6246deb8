package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// Upstream is the module images/seccomp.json is derived from; its version is
// the one go.mod requires (go list -m github.com/moby/profiles/seccomp).
const Upstream = "github.com/moby/profiles/seccomp"

// The sandbox's needs beyond the default, for a container WITHOUT
// CAP_SYS_ADMIN (Docker's default capability set), and nothing more
// (docs/container-flags.md, "images/seccomp.json"):
//
//   - clone with namespace flags: bwrap creates the user, mount, pid, ipc,
//     uts, net and cgroup namespaces with clone(2). The default allows clone
//     without CAP_SYS_ADMIN only without those flags (a masked compare).
//   - unshare: the verifier's own mount and pid namespaces, the join's pid
//     namespace (pkg/join); bwrap itself with --disable-userns.
//   - setns: sessions and helpers join the sandbox (pkg/join).
//   - mount, umount2: bwrap builds the sandbox root and the masks; the
//     verifier builds its own root.
//   - pivot_root: bwrap and the verifier switch root. The default denies it
//     even with CAP_SYS_ADMIN.
//
// Everything else stays as the default has it. In particular clone3 keeps
// the default's ENOSYS (callers fall back to clone(2), whose flags a filter
// can see), and the fd-based mount API (fsopen, fsconfig, fsmount, fspick,
// move_mount, open_tree, mount_setattr) stays denied: bwrap up to 0.11 uses
// none of it, and the verifier's one mount_setattr call falls back to
// remounts when seccomp answers EPERM. The kernel still checks capabilities
// on every added call; the profile only stops seccomp from refusing them
// before the kernel is asked.
var (
	namespaceCalls = []string{"clone", "mount", "setns", "umount2", "unshare"}
	pivotRoot      = "pivot_root"

	commentNamespaces = "sandboxd: allowed without CAP_SYS_ADMIN (the default allows these only " +
		"with it). bwrap creates its namespaces with clone(2) and builds the sandbox root with " +
		"mount/umount2/pivot_root; sandboxd joins the sandbox with setns and gives the verifier " +
		"its own mount and pid namespaces with unshare. The kernel still checks capabilities; " +
		"clone3 keeps the default's ENOSYS."
	commentPivotRoot = "sandboxd: pivot_root is not in the default profile at all (denied even " +
		"with CAP_SYS_ADMIN); bwrap and the verifier need it to switch root. The kernel allows " +
		"it only to a holder of CAP_SYS_ADMIN over the mount namespace."
)

// Added is every syscall name whose treatment differs from the default's for
// a container with Docker's default capabilities.
func Added() []string {
	return slices.Sorted(slices.Values(append(slices.Clone(namespaceCalls), pivotRoot)))
}

// Derive returns the default profile of the upstream module with the
// sandbox's additions, or an error when the default no longer has the shape
// the additions are written against (then read the new default and adapt).
func Derive() (*seccomp.Seccomp, error) {
	return derive(seccomp.DefaultProfile())
}

func derive(def *seccomp.Seccomp) (*seccomp.Seccomp, error) {
	prof, err := clone(def)
	if err != nil {
		return nil, err
	}
	var out []*seccomp.Syscall
	anchored, dropped := false, 0
	for _, e := range prof.Syscalls {
		// The default's "clone without namespace flags unless CAP_SYS_ADMIN"
		// (argument 0; argument 1 on s390) becomes "clone unless
		// CAP_SYS_ADMIN": with CAP_SYS_ADMIN the default allows clone
		// outright, so the two cases stay exclusive.
		if slices.Equal(e.Names, []string{"clone"}) && len(e.Args) > 0 && e.Excludes != nil && slices.Contains(e.Excludes.Caps, "CAP_SYS_ADMIN") {
			dropped++
			continue
		}
		out = append(out, e)
		if e.Includes != nil && slices.Equal(e.Includes.Caps, []string{"CAP_SYS_ADMIN"}) && slices.Contains(e.Names, "clone") {
			// Right after the CAP_SYS_ADMIN group, its mirror image for
			// the containers without it, limited to what the sandbox uses.
			if !containsAll(e.Names, namespaceCalls) {
				return nil, fmt.Errorf("the default's CAP_SYS_ADMIN group no longer holds all of %v", namespaceCalls)
			}
			anchored = true
			out = append(out,
				&seccomp.Syscall{
					LinuxSyscall: specs.LinuxSyscall{Names: slices.Clone(namespaceCalls), Action: specs.ActAllow},
					Comment:      commentNamespaces,
					Excludes:     &seccomp.Filter{Caps: []string{"CAP_SYS_ADMIN"}},
				},
				&seccomp.Syscall{
					LinuxSyscall: specs.LinuxSyscall{Names: []string{pivotRoot}, Action: specs.ActAllow},
					Comment:      commentPivotRoot,
				})
		}
	}
	if !anchored {
		return nil, errors.New("the default has no CAP_SYS_ADMIN group with clone in it")
	}
	if dropped == 0 {
		return nil, errors.New("the default has no masked clone rule for containers without CAP_SYS_ADMIN")
	}
	prof.Syscalls = out
	normalize(prof)
	if err := Check(def, prof); err != nil {
		return nil, err
	}
	return prof, nil
}

// normalize sorts every list whose order means nothing to the engine, so that
// a reordering upstream does not show as a change here.
func normalize(p *seccomp.Seccomp) {
	for _, e := range p.Syscalls {
		slices.Sort(e.Names)
		for _, f := range []*seccomp.Filter{e.Includes, e.Excludes} {
			if f != nil {
				slices.Sort(f.Caps)
				slices.Sort(f.Arches)
			}
		}
	}
}

// Render is the profile as committed: two-space indentation, no HTML
// escaping, one trailing newline.
func Render(p *seccomp.Seccomp) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Parse reads a profile in the engine's JSON format.
func Parse(b []byte) (*seccomp.Seccomp, error) {
	var p seccomp.Seccomp
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	for _, e := range p.Syscalls {
		if e.Name != "" { // the older one-name form
			e.Names = append(e.Names, e.Name)
			e.Name = ""
		}
	}
	return &p, nil
}

func clone(p *seccomp.Seccomp) (*seccomp.Seccomp, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// DockerCaps is Docker's default capability set.
var DockerCaps = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP",
	"CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// Rules is, for a container with caps on arch, each syscall name's rules in
// the filter the engine would load (kernel versions taken as new enough), as
// comparable strings. A name without rules gets the default action.
func Rules(p *seccomp.Seccomp, caps []string, arch string) map[string][]string {
	out := map[string][]string{}
	for _, e := range p.Syscalls {
		if !applies(e, caps, arch) {
			continue
		}
		r := string(e.Action)
		if e.ErrnoRet != nil {
			r += fmt.Sprintf("(%d)", *e.ErrnoRet)
		}
		for _, a := range e.Args {
			r += fmt.Sprintf(" arg%d %s %#x %#x", a.Index, a.Op, a.Value, a.ValueTwo)
		}
		for _, n := range append(slices.Clone(e.Names), e.Name) {
			if n != "" {
				out[n] = append(out[n], r)
			}
		}
	}
	for _, rs := range out {
		slices.Sort(rs)
	}
	return out
}

// applies is the engine's reading of includes and excludes (moby's
// setupSeccomp): every included capability must be held, no excluded one.
func applies(e *seccomp.Syscall, caps []string, arch string) bool {
	if f := e.Includes; f != nil {
		for _, c := range f.Caps {
			if !slices.Contains(caps, c) {
				return false
			}
		}
		if len(f.Arches) > 0 && !slices.Contains(f.Arches, arch) {
			return false
		}
	}
	if f := e.Excludes; f != nil {
		for _, c := range f.Caps {
			if slices.Contains(caps, c) {
				return false
			}
		}
		if len(f.Arches) > 0 && slices.Contains(f.Arches, arch) {
			return false
		}
	}
	return true
}

// Changed lists the names whose rules differ between a and b.
func Changed(a, b map[string][]string) []string {
	var out []string
	for n := range a {
		if !slices.Equal(a[n], b[n]) {
			out = append(out, n)
		}
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// arches are the architectures the check evaluates: every one a rule of the
// default names, and amd64.
func arches(p *seccomp.Seccomp) []string {
	out := []string{"amd64"}
	for _, e := range p.Syscalls {
		for _, f := range []*seccomp.Filter{e.Includes, e.Excludes} {
			if f != nil {
				out = append(out, f.Arches...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Check proves that prof differs from def by exactly the additions: for a
// container with Docker's default capabilities only in Added(), each now
// allowed outright; with CAP_SYS_ADMIN as well only in pivot_root. The
// settings outside the rules must be the default's too.
func Check(def, prof *seccomp.Seccomp) error {
	d, p := *def, *prof
	d.Syscalls, p.Syscalls = nil, nil
	if a, b := mustJSON(d), mustJSON(p); a != b {
		return fmt.Errorf("the profile's settings differ from the default's: %s, want %s", b, a)
	}
	withAdmin := append(slices.Clone(DockerCaps), "CAP_SYS_ADMIN")
	for _, arch := range arches(def) {
		for _, c := range []struct {
			caps []string
			want []string
		}{{DockerCaps, Added()}, {withAdmin, []string{pivotRoot}}} {
			got := Rules(prof, c.caps, arch)
			changed := Changed(Rules(def, c.caps, arch), got)
			if !slices.Equal(changed, c.want) {
				return fmt.Errorf("on %s with %s the profile differs from the default in %v, want exactly %v",
					arch, capsName(c.caps), changed, c.want)
			}
			for _, n := range c.want {
				if !slices.Equal(got[n], []string{string(specs.ActAllow)}) {
					return fmt.Errorf("on %s with %s %s has the rules %v, want one unconditional allow", arch, capsName(c.caps), n, got[n])
				}
			}
		}
	}
	return nil
}

func capsName(caps []string) string {
	if slices.Contains(caps, "CAP_SYS_ADMIN") {
		return "Docker's default capabilities and CAP_SYS_ADMIN"
	}
	return "Docker's default capabilities"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Diff describes, for a container with Docker's default capabilities on
// amd64, which names one profile allows (outright or with conditions) that
// the other denies.
func Diff(old, new *seccomp.Seccomp) string {
	a, b := Rules(old, DockerCaps, "amd64"), Rules(new, DockerCaps, "amd64")
	var gained, lost, other []string
	for _, n := range Changed(a, b) {
		switch wasOK, isOK := allows(a[n]), allows(b[n]); {
		case isOK && !wasOK:
			gained = append(gained, n)
		case wasOK && !isOK:
			lost = append(lost, n)
		default:
			other = append(other, fmt.Sprintf("%s, before:\n    %s\n  now:\n    %s", n,
				strings.Join(a[n], "\n    "), strings.Join(b[n], "\n    ")))
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "allowed now, denied before (%d): %s\n", len(gained), strings.Join(gained, " "))
	fmt.Fprintf(&s, "denied now, allowed before (%d): %s\n", len(lost), strings.Join(lost, " "))
	fmt.Fprintf(&s, "rules changed (%d):\n", len(other))
	for _, o := range other {
		fmt.Fprintf(&s, "  %s\n", o)
	}
	return s.String()
}

func allows(rules []string) bool {
	for _, r := range rules {
		if strings.HasPrefix(r, string(specs.ActAllow)) {
			return true
		}
	}
	return false
}
