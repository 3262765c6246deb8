// Package cgroup gives the agent's processes a cgroup of their own, with the
// task's memory, cpu and process limits, where the runtime lets sandboxd make
// one: cgroup v1 hierarchies, or a cgroup v2 tree delegated to it. A plain
// Docker container mounts its cgroups read-only, and then there is none to be
// had (Create says why); the container engine's own limits apply there.
//
// The daemon, the visitor and the verifier stay outside: an agent that
// exhausts its memory or its process limit runs into its own wall, not the
// daemon's.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Limits are what the agent's group may use; zero means no limit of that kind.
type Limits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
}

// Group is a cgroup (one directory per v1 hierarchy, or one v2 directory).
type Group struct {
	dirs  []string
	joins []*os.File
	desc  string
}

const root = "/sys/fs/cgroup"

// Create makes the group name below the daemon's own cgroup and sets l on
// it. The error says why no group could be made.
func Create(name string, l Limits) (*Group, error) {
	v2, own, err := locate()
	if err != nil {
		return nil, err
	}
	if v2 {
		return createV2(own[""], name, l)
	}
	return createV1(own, name, l)
}

// v1: one directory in each of the pids, memory and cpu hierarchies that
// are mounted and writable.
func createV1(own map[string]string, name string, l Limits) (*Group, error) {
	g := &Group{}
	var set []string
	for _, c := range []struct {
		ctrl  string
		files map[string]string
	}{
		{"pids", map[string]string{"pids.max": limitOrMax(l.Pids)}},
		{"memory", map[string]string{"memory.limit_in_bytes": limitOrV1Unlimited(l.MemoryBytes)}},
		{"cpu", cpuV1(l.CPUs)},
	} {
		path, ok := own[c.ctrl]
		if !ok {
			continue
		}
		dir := filepath.Join(root, c.ctrl, path, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			g.Remove()
			return nil, fmt.Errorf("cgroup v1 %s: %w (a container's cgroups are read-only unless the engine delegates them)", c.ctrl, err)
		}
		g.dirs = append(g.dirs, dir)
		for file, v := range c.files {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
				g.Remove()
				return nil, fmt.Errorf("cgroup v1 %s: set %s: %w", c.ctrl, file, err)
			}
		}
		if err := g.openJoin(dir, "tasks"); err != nil {
			g.Remove()
			return nil, err
		}
		set = append(set, c.ctrl)
	}
	if len(set) == 0 {
		return nil, errors.New("no pids, memory or cpu cgroup hierarchy is mounted")
	}
	g.desc = fmt.Sprintf("v1 %s (%s): %s", filepath.Join(own[set[0]], name), strings.Join(set, ", "), l)
	return g, nil
}

// v2: the limits need their controllers enabled in the parent, which the
// kernel refuses while the parent holds processes (the daemon itself): the
// daemon moves into a leaf of its own first.
func createV2(own, name string, l Limits) (*Group, error) {
	parent := filepath.Join(root, own)
	ctrls, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	var want []string
	for _, c := range controllers {
		if strings.Contains(" "+strings.TrimSpace(string(ctrls))+" ", " "+c+" ") {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("cgroup v2: no pids, memory or cpu controller is delegated to %s", parent)
	}
	enable := func() error {
		return os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(strings.Join(want, " ")), 0)
	}
	if err := enable(); err != nil {
		leaf := filepath.Join(parent, "sandboxd-daemon")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup v2: %w (a container's cgroups are read-only unless the engine delegates them)", err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2: move the daemon into %s: %w", leaf, err)
		}
		if err := enable(); err != nil {
			return nil, fmt.Errorf("cgroup v2: enable %s in %s: %w (other processes share the daemon's cgroup)", strings.Join(want, " "), parent, err)
		}
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	g := &Group{dirs: []string{dir}}
	files := map[string]string{"pids.max": limitOrMax(l.Pids), "memory.max": limitOrMax(l.MemoryBytes)}
	if l.CPUs > 0 {
		files["cpu.max"] = fmt.Sprintf("%d 100000", int64(l.CPUs*100000))
	}
	for file, v := range files {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			g.Remove()
			return nil, fmt.Errorf("cgroup v2: set %s: %w", file, err)
		}
	}
	if err := g.openJoin(dir, "cgroup.procs"); err != nil {
		g.Remove()
		return nil, err
	}
	g.desc = fmt.Sprintf("v2 %s: %s", filepath.Join(own, name), l)
	return g, nil
}

// openJoin opens the file of dir that a joining process writes "0" into.
// What joins is always a single-threaded process (join's forked copy), so
// moving its one thread moves all of it, and on v1 the file is tasks: a
// write to cgroup.procs takes the kernel's global threadgroup lock for
// writing, which after a quiet moment waits out an RCU grace period and
// holds back every fork on the machine meanwhile, while "0" written to tasks
// (the writer's own thread, by no number) skips that lock (Linux 6.0, and
// 5.4.213 on; older kernels take it either way). A pid number written to
// tasks would take the lock again
// (docs/failures.md#the-agents-cgroup-is-joined-by-thread). v2 moves a
// thread alone only within a threaded subtree, so there it is cgroup.procs
// (clone3 with CLONE_INTO_CGROUP would be the way round it there).
func (g *Group) openJoin(dir, file string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	g.joins = append(g.joins, f)
	return nil
}

// JoinFiles are the files, open for writing, that a single-threaded
// process writes "0" into, one after another, to join the group (join does
// it in the forked copy, before the command runs); everything it starts
// from then on is in the group too.
func (g *Group) JoinFiles() []*os.File { return g.joins }

// Remove removes the group's directories; they must hold no process.
func (g *Group) Remove() error {
	var first error
	for _, f := range g.joins {
		f.Close()
	}
	for _, d := range g.dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

func (g *Group) String() string { return g.desc }

func (l Limits) String() string {
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", l.MemoryBytes>>20))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("cpus %g", l.CPUs))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

func limitOrMax(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

func limitOrV1Unlimited(n int64) string {
	if n <= 0 {
		return "-1"
	}
	return strconv.FormatInt(n, 10)
}

func cpuV1(cpus float64) map[string]string {
	if cpus <= 0 {
		return map[string]string{"cpu.cfs_quota_us": "-1"}
	}
	return map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": strconv.FormatInt(int64(cpus*100000), 10)}
}

// controllers are the ones the limits need: a v1 group is made in each of
// their hierarchies, a v2 group has them enabled.
var controllers = []string{"pids", "memory", "cpu"}

// locate says whether /sys/fs/cgroup is a v2 tree, and where the daemon's
// own groups are.
func locate() (v2 bool, own map[string]string, err error) {
	own, err = ownCgroups()
	return fsType(root) == "cgroup2", own, err
}

// ownCgroups maps each v1 controller (and "" for v2) to the daemon's cgroup
// path, from /proc/self/cgroup.
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	defer f.Close()
	own := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			own[ctrl] = parts[2]
		}
	}
	return own, sc.Err()
}

// fsType is the type of the filesystem mounted at dir, from mountinfo.
func fsType(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	typ := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && len(fields) > 4 && fields[4] == dir {
				typ = fields[i+1] // the last mount on dir wins
			}
		}
	}
	return typ
}

// Prune removes the groups next to where Create makes them whose name starts
// with prefix and that stale says are left over (a daemon killed with
// SIGKILL cannot remove its own). Only empty groups can be removed at all.
func Prune(prefix string, stale func(name string) bool) {
	v2, own, err := locate()
	if err != nil {
		return
	}
	var parents []string
	if v2 {
		parents = []string{filepath.Join(root, own[""])}
	} else {
		for _, ctrl := range controllers {
			if path, ok := own[ctrl]; ok {
				parents = append(parents, filepath.Join(root, ctrl, path))
			}
		}
	}
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && stale(e.Name()) {
				os.Remove(filepath.Join(parent, e.Name()))
			}
		}
	}
}
