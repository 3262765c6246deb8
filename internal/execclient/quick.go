package execclient

import (
	"context"
	"os"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/control/wire"
)

// childRoleEnv is childproc.Env: a process started in a child role is not
// a `sandboxd exec`, whatever its arguments (TestQuickExecKnowsTheChildRoleMarker).
const childRoleEnv = "SANDBOXD_CHILD"

// The common `sandboxd exec` runs here, before the packages that sort after
// this one are initialized, and the process ends with its exit code. What
// Quick does not take (a terminal, help, a usage error) is left to
// cmd/sandboxd, whose parser is the full one and calls Run the same way.
func init() {
	if len(os.Args) < 2 || os.Args[1] != "exec" {
		return
	}
	if role, _ := syscall.Getenv(childRoleEnv); role != "" { // as childproc.Maybe reads it
		return
	}
	harness, req, ok := Quick(os.Args[2:], os.Getenv("SANDBOXD_HARNESS_DIR"))
	if !ok {
		return
	}
	os.Exit(Run(context.Background(), harness, req, nil))
}

// Quick parses exec's arguments when they are of the common kinds, as
// cmd/sandboxd's flags would parse them (TestQuickParsesAsExecsFlags):
// --harness-dir, -u, -w, -e and --timeout with a value (`-u X`, `-u=X`, with
// one dash or two), -i, and the command after them or after "--". ok is
// false for anything else: -t (the terminal needs more than this package
// may import), -h, an unknown flag or one without its value, a bundle such
// as -iu, a bool flag given a value, or no command.
func Quick(args []string, harnessEnv string) (harness string, req Request, ok bool) {
	harness = harnessEnv
	if harness == "" {
		harness = wire.DefaultHarnessDir
	}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		name := a[1:]
		if name[0] == '-' {
			name = name[1:]
		}
		if name == "" || name[0] == '-' || name[0] == '=' {
			return "", Request{}, false
		}
		name, value, hasValue := cut(name, '=')
		if name == "i" {
			if hasValue {
				return "", Request{}, false
			}
			req.Stdin = true
			continue
		}
		var set *string
		switch name {
		case "harness-dir":
			set = &harness
		case "u":
			set = &req.User
		case "w":
			set = &req.Dir
		case "timeout":
			set = &req.Timeout
		case "e":
		default:
			return "", Request{}, false
		}
		if !hasValue {
			if i+1 >= len(args) {
				return "", Request{}, false
			}
			i++
			value = args[i]
		}
		if set == nil {
			req.Env = append(req.Env, value)
		} else {
			*set = value
		}
	}
	if i >= len(args) {
		return "", Request{}, false
	}
	req.Argv = args[i:]
	return harness, req, true
}

// cut is strings.Cut, which this package may not import: package strings
// sorts after reflect and so is initialized after it.
func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
