package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/harness"
	"github.com/sandboxd/sandboxd/pkg/doctor"
)

// exitDoctorRefused is doctor's exit when it ran no program of the image:
// a serve holds the harness dir, or an agent has had this root filesystem.
const exitDoctorRefused = 3

func runDoctor(ctx context.Context, args []string) int {
	fs := flags("doctor", "[--harness-dir DIR] [--json]")
	harnessDir := harnessDirFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON document")
	bwrapPath := fs.String("bwrap", "bwrap", "the bubblewrap binary, a `PATH` or a name on PATH")
	agentUser := fs.String("agent-user", "", "the `USER[:GROUP]` that sessions will run as")
	if ok, code := noArgs(fs, args); !ok {
		return code
	}
	cfg := doctor.Config{Bwrap: *bwrapPath, AgentUser: *agentUser}
	// The image's bwrap, its libraries and /bin/sh run as root here: not
	// beside a serve, nor once an agent has had this root filesystem.
	refused := false
	var live json.RawMessage
	if os.Geteuid() == 0 {
		release, err := harness.HoldForDoctor(*harnessDir)
		if err != nil {
			cfg.NoExec = err.Error()
			refused = errors.Is(err, harness.ErrLocked) || errors.Is(err, harness.ErrRootfsUsed)
			if errors.Is(err, harness.ErrLocked) {
				var raw json.RawMessage
				if (control.Client{HarnessDir: *harnessDir}).Call(ctx, control.Request{Op: "status"}, &raw) == nil {
					live = raw
				}
			}
		} else {
			defer release()
		}
	}
	report := doctor.Run(ctx, cfg)
	if *asJSON {
		b, _ := json.MarshalIndent(struct {
			doctor.Report
			Serve json.RawMessage `json:"serve,omitempty"` // the live serve's status, when one holds the harness dir
		}{report, live}, "", "  ")
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
		switch {
		case refused:
			fmt.Printf("doctor ran no program of the image: %s\n", report.Refused)
			printLive(live)
		case report.OK:
			fmt.Println("serve would start here.")
		default:
			fmt.Println("serve would refuse to start here: fix the MISSING lines above.")
		}
	}
	switch {
	case refused:
		fmt.Fprintln(os.Stderr, "sandboxd: doctor: ran no program of the image: "+report.Refused)
		return exitDoctorRefused
	case !report.OK:
		fmt.Fprintln(os.Stderr, "sandboxd: doctor: the sandbox cannot be built here")
		return 1
	}
	return 0
}

// printLive says what the serve that holds the harness dir reports of its
// sandbox, instead of a sandbox of doctor's own.
func printLive(raw json.RawMessage) {
	var st daemon.Status
	if raw == nil || json.Unmarshal(raw, &st) != nil {
		return
	}
	fmt.Printf("the serve that runs here (sandboxd status) has its sandbox: pid %d, bubblewrap %s (%s), id map %s, namespaces %s, phase %s\n",
		st.Sandbox.PID, st.Sandbox.Bwrap, st.Sandbox.BwrapPath, st.Sandbox.IDMap, strings.Join(st.Sandbox.Namespaces, " "), st.Phase)
	for _, d := range st.Degradations {
		fmt.Printf("degraded: %s\n", d)
	}
}
