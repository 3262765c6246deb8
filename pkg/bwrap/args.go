package bwrap

import (
	"errors"
	"fmt"
	"strconv"
)

// introduced records the release that added each option we may emit. Every
// option present in bwrap 0.4.1's --help is listed as the minimum we support;
// later ones carry their own release. An option missing from this table cannot
// be emitted at all: an unknown --clearenv on 0.4.1 made every command fail
// (docs/failures.md#options-newer-than-the-bwrap-are-never-emitted).
var introduced = map[string]Version{
	"--args":               Minimum,
	"--bind":               Minimum,
	"--bind-data":          Minimum,
	"--bind-try":           Minimum,
	"--dev-bind-try":       Minimum,
	"--cap-add":            Minimum,
	"--cap-drop":           Minimum,
	"--chdir":              Minimum,
	"--dev":                Minimum,
	"--dev-bind":           Minimum,
	"--die-with-parent":    Minimum,
	"--dir":                Minimum,
	"--info-fd":            Minimum,
	"--proc":               Minimum,
	"--remount-ro":         Minimum,
	"--ro-bind":            Minimum,
	"--ro-bind-data":       Minimum,
	"--symlink":            Minimum,
	"--tmpfs":              Minimum,
	"--unshare-cgroup-try": Minimum,
	"--unshare-ipc":        Minimum,
	"--unshare-net":        Minimum,
	"--unshare-pid":        Minimum,
	"--unshare-user":       Minimum,
	"--unshare-uts":        Minimum,
	"--userns-block-fd":    Minimum,
	"--as-pid-1":           Minimum,
	"--hostname":           Minimum,
	"--clearenv":           {0, 5, 0},
	"--perms":              {0, 5, 0},
	"--chmod":              {0, 5, 0},
	"--size":               {0, 7, 0},
	"--disable-userns":     {0, 8, 0},
}

// ErrUnsupportedOption means the argv would need an option the found bwrap lacks.
var ErrUnsupportedOption = errors.New("bwrap option not supported by this bwrap")

// Args accumulates a bwrap argv for one bwrap version and refuses options
// that version does not have. The first error sticks; Build returns it.
type Args struct {
	v    Version
	argv []string
	err  error
}

// NewArgs starts an argv for bwrap v.
func NewArgs(v Version) *Args { return &Args{v: v} }

// Has reports whether the bwrap in use knows opt.
func (a *Args) Has(opt string) bool {
	since, ok := introduced[opt]
	return ok && !a.v.Less(since)
}

// Add appends an option and its operands.
func (a *Args) Add(opt string, operands ...string) *Args {
	if a.err != nil {
		return a
	}
	since, ok := introduced[opt]
	switch {
	case !ok:
		a.err = fmt.Errorf("%w: %s is not in sandboxd's option table", ErrUnsupportedOption, opt)
	case a.v.Less(since):
		a.err = fmt.Errorf("%w: %s needs bwrap %s, found %s", ErrUnsupportedOption, opt, since, a.v)
	default:
		a.argv = append(append(a.argv, opt), operands...)
	}
	return a
}

// AddFD appends an option whose operand is a file descriptor number.
func (a *Args) AddFD(opt string, fd int, operands ...string) *Args {
	return a.Add(opt, append([]string{strconv.Itoa(fd)}, operands...)...)
}

// Build returns the argv, or the first refusal.
func (a *Args) Build() ([]string, error) {
	if a.err != nil {
		return nil, a.err
	}
	return append([]string(nil), a.argv...), nil
}
