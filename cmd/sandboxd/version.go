package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/sandboxd/sandboxd/internal/daemon"
)

// versionInfo is what `sandboxd version --json` prints.
type versionInfo struct {
	// Version is the release: what the build's ldflags set (make build:
	// git describe), else the module's version (go install MODULE@VERSION),
	// else "dev".
	Version       string `json:"version"`
	Module        string `json:"module,omitempty"`
	ModuleVersion string `json:"module_version,omitempty"` // as the Go toolchain stamped it; "(devel)" for a plain build in older toolchains
	Commit        string `json:"commit,omitempty"`         // vcs.revision, when built in a checkout
	CommitTime    string `json:"commit_time,omitempty"`
	Modified      bool   `json:"modified"` // the checkout had uncommitted changes
	Go            string `json:"go"`
	Platform      string `json:"platform"`
}

// buildVersion reads the version of this binary.
func buildVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(daemon.Version, bi)
}

// versionOf is the version from the one ldflags set (ldflags; "" or "dev"
// when they set none) and the binary's build info (nil when it has none).
func versionOf(ldflags string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: ldflags, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		v.Go = bi.GoVersion
		v.Module, v.ModuleVersion = bi.Main.Path, bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" || v.Version == "dev" {
		v.Version = "dev"
		if mv := v.ModuleVersion; mv != "" && mv != "(devel)" {
			v.Version = mv
		}
	}
	return v
}

func runVersion(_ context.Context, args []string) int {
	fs := flags("version", "[--json]")
	asJSON := fs.Bool("json", false, "print the version, module, commit and Go version as one JSON document")
	if ok, code := noArgs(fs, args); !ok {
		return code
	}
	v := buildVersion()
	if *asJSON {
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Println(string(b))
		return 0
	}
	line := "sandboxd " + v.Version
	var notes []string
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "-dirty"
		}
		notes = append(notes, "commit "+c)
	}
	notes = append(notes, v.Go, v.Platform)
	fmt.Printf("%s (%s)\n", line, strings.Join(notes, ", "))
	return 0
}
