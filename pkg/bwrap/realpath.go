package bwrap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// RealPath is p, made absolute, with every symlink in it resolved as the
// kernel resolves it now. The end of a path that does not exist yet (a
// harness dir that serve is about to make) is kept as given, beneath the
// real path of the part that exists; a name on the way that is a symlink
// to nothing is an error, since making the directory would follow it.
//
// Every path a sandbox hides is resolved with it once, before anything of
// the agent's runs, and the result is what the sandbox hides and what
// visitors mask: Config.Hide holds real paths only
// (docs/failures.md#hidden-paths-are-resolved-once-at-start).
func RealPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var missing []string
	for dir := abs; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(append([]string{real}, missing...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == "/" {
			return "", fmt.Errorf("resolve %s: %w", abs, err)
		}
		if _, lerr := os.Lstat(dir); lerr == nil {
			return "", fmt.Errorf("resolve %s: %s is a symlink to nothing", abs, dir)
		}
		missing = append([]string{filepath.Base(dir)}, missing...)
	}
}
