// Package childproc runs parts of sandboxd that must live in a fresh process:
// the binary re-executes itself with a marker in its environment, and main
// hands control to the registered function before doing anything else.
//
// A Go process cannot join a user namespace once it has threads, and must not
// leave a long-lived process of its own inside the sandbox, so every
// namespace-crossing step is a short-lived child run through this table.
package childproc

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// Env is the variable that names the child role. Wrapper processes get only
// PATH and this marker; the marker never reaches a session's environment.
const Env = "SANDBOXD_CHILD"

var roles = map[string]func(args []string) int{}

// Add registers a child role; packages call it from init.
func Add(name string, run func(args []string) int) {
	if _, dup := roles[name]; dup {
		panic("childproc: duplicate role " + name)
	}
	roles[name] = run
}

// Maybe runs the child role named in the environment, if any, and exits with
// its status. main calls it first.
func Maybe() {
	name := os.Getenv(Env)
	if name == "" {
		return
	}
	run, ok := roles[name]
	if !ok {
		known := make([]string, 0, len(roles))
		for k := range roles {
			known = append(known, k)
		}
		sort.Strings(known)
		fmt.Fprintf(os.Stderr, "sandboxd: unknown child role %q (known: %s)\n", name, strings.Join(known, ", "))
		os.Exit(125)
	}
	os.Unsetenv(Env)
	os.Exit(run(os.Args[1:]))
}

// Environ is the whole environment of a child process of the given role.
func Environ(role string) []string {
	return []string{"PATH=" + DefaultPath, Env + "=" + role}
}

// DefaultPath is Docker's default PATH: the only variable that wrapper
// processes get besides their role
// (docs/failures.md#helpers-and-pid-1-start-with-path-only), and the PATH a
// command is looked up in when its environment has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
