// Package idmap maps ids into the sandbox's user namespace and resolves
// `user[:group]` the way Docker does.
//
// The sandbox's user namespace gets an identity map over the container's whole
// id space: a fixed `0 0 65536` breaks under userns-remap and rootless
// runtimes, a single-id map makes every image file owned by nobody and
// dropping to the task's user impossible, and a map without the ids bwrap runs
// as fails outright (docs/failures.md#identity-map-copies-the-extents-of-the-container,
// docs/failures.md#identity-map-includes-the-ids-bwrap-runs-as).
package idmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Extent is one line of a uid_map or gid_map: Length ids starting at Inside in
// the child namespace stand for the ids starting at Outside in its parent.
type Extent struct {
	Inside, Outside, Length uint32
}

// Map is a whole uid_map or gid_map.
type Map []Extent

// ErrRefused is returned when the kernel will not take a map: the caller may
// fall back to a single-id map only when the operator allowed degradation.
var ErrRefused = errors.New("id map refused by the kernel")

// Parse reads the text of a /proc/PID/{uid,gid}_map file.
func Parse(text string) (Map, error) {
	var m Map
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("parse id map line %q: want three numbers", sc.Text())
		}
		var n [3]uint32
		for i, s := range f {
			v, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("parse id map line %q: %w", sc.Text(), err)
			}
			n[i] = uint32(v)
		}
		m = append(m, Extent{Inside: n[0], Outside: n[1], Length: n[2]})
	}
	return m, sc.Err()
}

// Own reads this process's map of the given kind ("uid" or "gid").
func Own(kind string) (Map, error) {
	b, err := os.ReadFile("/proc/self/" + kind + "_map")
	if err != nil {
		return nil, fmt.Errorf("read own %s map: %w", kind, err)
	}
	return Parse(string(b))
}

// Identity is the map that gives a child namespace every id this namespace
// has, each standing for itself: every extent of ours, copied as
// `start start length`.
func (m Map) Identity() Map {
	out := make(Map, len(m))
	for i, e := range m {
		out[i] = Extent{Inside: e.Inside, Outside: e.Inside, Length: e.Length}
	}
	return out
}

// Contains reports whether id (as seen in this namespace) is inside the map.
func (m Map) Contains(id uint32) bool {
	for _, e := range m {
		if id >= e.Outside && uint64(id) < uint64(e.Outside)+uint64(e.Length) {
			return true
		}
	}
	return false
}

// Single is the degraded map: only id stands for itself, as root inside.
func Single(id uint32) Map {
	return Map{{Inside: 0, Outside: id, Length: 1}}
}

// String formats the map the way the kernel wants it written: in one write.
func (m Map) String() string {
	var b bytes.Buffer
	for _, e := range m {
		fmt.Fprintf(&b, "%d %d %d\n", e.Inside, e.Outside, e.Length)
	}
	return b.String()
}

// Line is the map on one line, extents joined by ", " ("0 0 65536"), for
// status and doctor: a container in a user namespace of its own (Kubernetes
// hostUsers: false) has 65,536 ids, not the host's 4,294,967,295.
func (m Map) Line() string {
	return strings.ReplaceAll(strings.TrimSpace(m.String()), "\n", ", ")
}

// Write installs uid and gid maps for the user namespace of pid. Each map
// file takes exactly one write, so each is written whole, once
// (docs/failures.md#identity-map-includes-the-ids-bwrap-runs-as).
// setgroups is left at "allow" so that the session's user can get its
// supplementary groups.
func Write(pid int, uid, gid Map) error {
	if err := writeOnce(fmt.Sprintf("/proc/%d/uid_map", pid), uid.String()); err != nil {
		return err
	}
	return writeOnce(fmt.Sprintf("/proc/%d/gid_map", pid), gid.String())
}

func writeOnce(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(text)); err != nil {
		return fmt.Errorf("write %s (%q): %w: %w", path, strings.TrimSpace(text), ErrRefused, err)
	}
	return nil
}
