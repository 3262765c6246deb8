package daemon

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
)

// resolveHidden gives every path the sandbox hides — the harness dir and
// cfg.Hide (the task dir under trial) — and the tests dir grading copies
// from, as its real path, once, when serve starts and before anything of
// the agent's runs. The sandbox hides, and visitors mask, exactly what
// those paths named then: a task dir named through a symlink is hidden by
// its target, never by the link's name with the target bound back beside
// it, and no link the agent may retarget later is followed again
// (docs/failures.md#hidden-paths-are-resolved-once-at-start). The tests
// dir keeps its own last name: grading refuses a symlink there.
func resolveHidden(cfg *config.Config) error {
	harness, err := bwrap.RealPath(cfg.HarnessDir)
	if err != nil {
		return fmt.Errorf("harness dir: %w", err)
	}
	cfg.HarnessDir = harness
	var hide []string
	for _, h := range cfg.Hide {
		real, err := bwrap.RealPath(h)
		if err != nil {
			return fmt.Errorf("hide: %w", err)
		}
		// What lies in the harness dir is hidden with it.
		if config.Within(real, harness) || slices.Contains(hide, real) {
			continue
		}
		hide = append(hide, real)
	}
	cfg.Hide = hide
	if cfg.Tests != "" {
		dir, err := bwrap.RealPath(filepath.Dir(cfg.Tests))
		if err != nil {
			return fmt.Errorf("the task's tests: %w", err)
		}
		cfg.Tests = filepath.Join(dir, filepath.Base(cfg.Tests))
	}
	return nil
}
