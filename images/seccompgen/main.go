// Command seccompgen writes images/seccomp.json: the default seccomp profile
// of github.com/moby/profiles/seccomp (the version go.mod requires) plus
// exactly what the sandbox needs, and refuses to write a profile that differs
// from the default by anything else.
//
//	go run ./images/seccompgen -o images/seccomp.json   (make seccomp)
//	go run ./images/seccompgen -check images/seccomp.json
//	go run ./images/seccompgen -diff OLD.json           what a regeneration changes
//
// To follow a newer default: go get github.com/moby/profiles/seccomp@VERSION,
// make seccomp, read the -diff against the committed file, and commit both.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
)

func main() {
	out := flag.String("o", "", "write the profile to this file (default: stdout)")
	check := flag.String("check", "", "exit 1 unless this file is exactly the derived profile")
	diff := flag.String("diff", "", "print which syscalls the derived profile allows that this older profile denied, and vice versa")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: seccompgen [-o FILE | -check FILE | -diff OLD.json]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	prof, err := Derive()
	if err != nil {
		fail("deriving from %s: %v", upstreamVersion(), err)
	}
	text, err := Render(prof)
	if err != nil {
		fail("%v", err)
	}
	switch {
	case *check != "":
		have, err := os.ReadFile(*check)
		if err != nil {
			fail("%v", err)
		}
		if !bytes.Equal(have, text) {
			fail("%s is not the profile derived from %s: run make seccomp", *check, upstreamVersion())
		}
		fmt.Fprintf(os.Stderr, "%s is the profile derived from %s\n", *check, upstreamVersion())
	case *diff != "":
		b, err := os.ReadFile(*diff)
		if err != nil {
			fail("%v", err)
		}
		old, err := Parse(b)
		if err != nil {
			fail("%s: %v", *diff, err)
		}
		fmt.Print(Diff(old, prof))
	case *out != "":
		if err := os.WriteFile(*out, text, 0o644); err != nil {
			fail("%v", err)
		}
	default:
		os.Stdout.Write(text)
	}
}

// upstreamVersion names the module and version this binary was built with.
func upstreamVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == Upstream {
				return d.Path + " " + d.Version
			}
		}
	}
	return Upstream
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "seccompgen: "+format+"\n", args...)
	os.Exit(1)
}
