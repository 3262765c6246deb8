package bwrap

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/masks"
)

// DataFile is a file that exists only in the sandbox's view (the hosts file
// with peers, an apt proxy configuration): bwrap copies it from a descriptor,
// so no mount source names the harness and nothing is written into the shared
// filesystem.
type DataFile struct {
	Path     string
	Data     []byte
	ReadOnly bool
}

// mountPlan emits the sandbox's filesystem, in order, into a.
type mountPlan struct {
	root    string // the substrate root as seen by the daemon; "/" except in tests
	cfg     *Config
	dataFDs []*os.File // descriptors for --bind-data, numbered from firstDataFD
	firstFD int
}

func (p *mountPlan) emit(a *Args) error {
	a.Add("--bind", "/", "/")
	a.Add("--proc", "/proc")
	a.Add("--dev", "/dev")
	// POSIX shared memory (Python's multiprocessing, PostgreSQL) needs a
	// /dev/shm anyone may write, as Docker makes it: sticky, 1777, 64 MiB.
	// bwrap's own /dev/shm is 0755 root, and before 0.5 nothing can change
	// that (the sandbox then lacks it for a non-root agent).
	if a.Has("--perms") {
		a.Add("--perms", "1777")
		if a.Has("--size") {
			a.Add("--size", strconv.Itoa(64<<20))
		}
		a.Add("--tmpfs", "/dev/shm")
	}
	for _, d := range p.cfg.Devices {
		if _, err := os.Stat(p.path(d)); err == nil {
			a.Add("--dev-bind", d, d)
		}
	}
	for _, m := range masks.ReadOnly {
		if _, err := os.Stat(p.path(m)); err == nil {
			a.Add("--ro-bind", m, m)
		}
	}
	for _, m := range masks.Masked {
		st, err := os.Stat(p.path(m))
		if err != nil {
			continue
		}
		if st.IsDir() {
			a.Add("--tmpfs", m).Add("--remount-ro", m)
		} else {
			a.Add("--ro-bind", "/dev/null", m)
		}
	}
	if err := p.hide(a); err != nil {
		return err
	}
	for _, m := range p.cfg.Mask {
		a.Add("--tmpfs", m)
	}
	for _, f := range p.cfg.Files {
		fd, err := p.dataFD(f.Data)
		if err != nil {
			return err
		}
		// Readable by every user, as the files they stand in for are
		// (docs/failures.md#data-files-are-readable-by-every-user):
		// bwrap makes a data file 0600 root otherwise, and a non-root
		// agent could then resolve no name. Before 0.5 there is no
		// --perms; Start gives the writable ones their mode instead.
		if a.Has("--perms") {
			a.Add("--perms", "0644")
		}
		if f.ReadOnly {
			a.AddFD("--ro-bind-data", fd, f.Path)
		} else {
			a.AddFD("--bind-data", fd, f.Path)
		}
	}
	for _, s := range p.cfg.HostSockets {
		a.Add("--ro-bind", "/dev/null", s)
	}
	return nil
}

func (p *mountPlan) path(abs string) string { return filepath.Join(p.root, abs) }

// hide makes each hidden path absent, not empty
// (docs/failures.md#harness-absent-not-empty): its parent is rebuilt as a
// tmpfs and every sibling is bound back, except other hidden paths and other
// harness dirs. Parents are rebuilt shallowest first so that a
// deeper rebuild happens inside the view the shallower one made.
func (p *mountPlan) hide(a *Args) error {
	byParent := map[string]map[string]bool{}
	// A data file must never be created in the shared filesystem as a mount
	// point (the verifier shares it, and it would outlive the sandbox): where
	// its path does not exist, its parent is rebuilt like a hidden path's,
	// with nothing left out, and the file appears only inside that tmpfs.
	for _, f := range p.cfg.Files {
		if _, err := os.Lstat(p.path(f.Path)); err == nil {
			continue
		}
		parent := filepath.Dir(filepath.Clean(f.Path))
		if parent == "/" {
			return fmt.Errorf("data file %s: cannot add a file directly under /", f.Path)
		}
		if st, err := os.Stat(p.path(parent)); err != nil || !st.IsDir() {
			return fmt.Errorf("data file %s: its directory does not exist", f.Path)
		}
		if byParent[parent] == nil {
			byParent[parent] = map[string]bool{}
		}
	}
	for _, h := range p.cfg.Hide {
		h = filepath.Clean(h)
		if !filepath.IsAbs(h) {
			return fmt.Errorf("hide %q: path must be absolute", h)
		}
		if _, err := os.Lstat(p.path(h)); err != nil {
			continue // nothing there, nothing to hide
		}
		// Through a symlink, the link's name would be hidden and its
		// target bound back as a sibling: only a real path is hidden.
		real, err := filepath.EvalSymlinks(p.path(h))
		if err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
		if real != p.path(h) {
			return fmt.Errorf("hide %s: the path goes through a symlink (it is %s): hide its real path, resolved once before the sandbox is built (RealPath)", h, real)
		}
		parent := filepath.Dir(h)
		if parent == "/" {
			return fmt.Errorf("hide %s: a hidden directory directly under / cannot be made absent; put it one level deeper (for example /media/%s)", h, filepath.Base(h))
		}
		if byParent[parent] == nil {
			byParent[parent] = map[string]bool{}
		}
		byParent[parent][filepath.Base(h)] = true
	}
	parents := make([]string, 0, len(byParent))
	for parent := range byParent {
		parents = append(parents, parent)
	}
	sort.Slice(parents, func(i, j int) bool {
		if di, dj := strings.Count(parents[i], "/"), strings.Count(parents[j], "/"); di != dj {
			return di < dj
		}
		return parents[i] < parents[j]
	})
	// Pins and rebuilds in one order, shallowest first: a pin below a
	// rebuilt parent must come after that parent's tmpfs, which would
	// cover it otherwise.
	pins := ancestorsToPin(parents)
	steps := make([]string, 0, len(pins)+len(parents))
	pin := map[string]bool{}
	for _, d := range pins {
		pin[d] = true
		steps = append(steps, d)
	}
	steps = append(steps, parents...)
	sort.SliceStable(steps, func(i, j int) bool { return strings.Count(steps[i], "/") < strings.Count(steps[j], "/") })
	for _, parent := range steps {
		if p.insideHidden(parent) {
			continue
		}
		if pin[parent] {
			a.Add("--bind", parent, parent)
			continue
		}
		entries, err := os.ReadDir(p.path(parent))
		if err != nil {
			if os.IsNotExist(err) {
				continue // nothing to hide
			}
			return fmt.Errorf("hide entries of %s: %w", parent, err)
		}
		if st, err := os.Stat(p.path(parent)); err == nil && a.Has("--perms") {
			a.Add("--perms", fmt.Sprintf("%04o", st.Mode().Perm()))
		}
		a.Add("--tmpfs", parent)
		for _, e := range entries {
			name := e.Name()
			full := filepath.Join(parent, name)
			if byParent[parent][name] || p.isHarness(full) {
				continue
			}
			switch t := e.Type(); {
			case t&fs.ModeSymlink != 0:
				target, err := os.Readlink(p.path(full))
				if err != nil {
					return fmt.Errorf("hide: read link %s: %w", full, err)
				}
				a.Add("--symlink", target, full)
			// -try: a sibling that vanishes between the listing and the
			// mount must not cost the whole sandbox.
			case t&fs.ModeDevice != 0:
				a.Add("--dev-bind-try", full, full)
			default:
				a.Add("--bind-try", full, full)
			}
		}
	}
	return nil
}

// ancestorsToPin lists the directories above the rebuilt parents, shallowest
// first, that would otherwise be plain directories of the sandbox's view.
// Each is bound onto itself, so that it is a mount point there: the agent
// can then neither rename nor replace it (EBUSY), and the path to every
// hidden directory means, for the daemon, what it meant at start
// (docs/failures.md#the-way-to-the-harness-cannot-be-renamed). A
// directory right inside a rebuilt parent is a bound-back sibling already,
// and one that is a rebuilt parent is a tmpfs; one deeper below a rebuilt
// parent is pinned after that parent is rebuilt (see hide).
func ancestorsToPin(parents []string) []string {
	rebuilt := map[string]bool{}
	for _, parent := range parents {
		rebuilt[parent] = true
	}

	seen := map[string]bool{}
	var out []string
	for _, parent := range parents {
		var chain []string
		for d := filepath.Dir(parent); d != "/"; d = filepath.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			d := chain[i]
			if seen[d] || rebuilt[d] || rebuilt[filepath.Dir(d)] {
				continue
			}
			seen[d] = true
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") < strings.Count(out[j], "/") })
	return out
}

func (p *mountPlan) insideHidden(dir string) bool {
	for _, h := range p.cfg.Hide {
		if dir == h || strings.HasPrefix(dir, filepath.Clean(h)+"/") {
			return true
		}
	}
	return false
}

func (p *mountPlan) isHarness(dir string) bool {
	_, err := os.Lstat(filepath.Join(p.path(dir), masks.HarnessMarker))
	return err == nil
}
