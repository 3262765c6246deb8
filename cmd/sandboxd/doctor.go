package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

func runDoctor(ctx context.Context, args []string) int {
	fs := flags("doctor", "[--json]")
	asJSON := fs.Bool("json", false, "print one JSON document")
	bwrapPath := fs.String("bwrap", "bwrap", "the bubblewrap binary, a `PATH` or a name on PATH")
	agentUser := fs.String("agent-user", "", "the `USER[:GROUP]` that sessions will run as")
	if ok, code := noArgs(fs, args); !ok {
		return code
	}
	report := bwrap.Doctor(ctx, bwrap.DoctorConfig{Bwrap: *bwrapPath, AgentUser: *agentUser})
	if *asJSON {
		b, _ := json.MarshalIndent(report, "", "  ")
		fmt.Println(string(b))
	} else {
		for _, c := range report.Checks {
			mark := "ok     "
			if !c.OK {
				mark = "MISSING"
			} else if c.Warn {
				mark = "WARN   "
			}
			fmt.Printf("%s %-28s %s\n", mark, c.Name, c.Detail)
			if (!c.OK || c.Warn) && c.Fix != "" {
				fmt.Printf("        fix: %s\n", c.Fix)
			}
		}
		if report.OK {
			fmt.Println("serve would start here.")
		} else {
			fmt.Println("serve would refuse to start here: fix the MISSING lines above.")
		}
	}
	if !report.OK {
		fmt.Fprintln(os.Stderr, "sandboxd: doctor: the sandbox cannot be built here")
		return 1
	}
	return 0
}
