package layer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/pkg/task"
)

// hashVersion names the recipe below; bump it when what goes into the hash
// changes, so that old and new groups never share a tag by accident.
const hashVersion = "sandboxd-adapt-env v1"

// EnvHash is the content hash that groups tasks: every file of environment/
// (path, type, permission bits, content or link target — never times or
// owners, which a checkout does not preserve) and the settings that the
// container runtime applies to the image as a whole (docker_image, os, cpus,
// memory, storage, GPUs). One container definition per group must fit every
// task in it, so tasks that differ in those settings get their own image even
// when their environment/ is byte-identical. What serve reads per task (env,
// network, users, timeouts) is left out: each task's own task.toml carries it.
func EnvHash(t *task.Task) (string, error) {
	h := sha256.New()
	e := t.Environment
	fmt.Fprintf(h, "%s\n", hashVersion)
	fmt.Fprintf(h, "docker_image=%q\nos=%q\ncpus=%s\nmemory_mb=%d\nstorage_mb=%d\ngpus=%d\ngpu_types=%q\n",
		e.DockerImage, e.OS, strconv.FormatFloat(e.CPUs, 'g', -1, 64), e.MemoryMB, e.StorageMB, e.GPUs, e.GPUTypes)
	if err := hashTree(h, filepath.Join(t.Dir, "environment")); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashTree writes one line per entry under root, in byte order of the
// slash-separated relative path. A missing root hashes as empty: a task that
// names docker_image needs no environment/.
func hashTree(w io.Writer, root string) error {
	type entry struct{ rel, line string }
	var entries []entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return fmt.Errorf("hash %s: %w", p, err)
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("hash %s: %w", p, err)
		}
		perm := strconv.FormatUint(uint64(info.Mode().Perm()), 8)
		switch {
		case d.IsDir():
			entries = append(entries, entry{rel, fmt.Sprintf("dir %q %s", rel, perm)})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("hash %s: %w", p, err)
			}
			entries = append(entries, entry{rel, fmt.Sprintf("link %q %q", rel, target)})
		case info.Mode().IsRegular():
			sum, err := fileSHA256(p)
			if err != nil {
				return err
			}
			entries = append(entries, entry{rel, fmt.Sprintf("file %q %s %s", rel, perm, sum)})
		default:
			// Sockets and devices cannot be sent in a build context either.
			return fmt.Errorf("hash %s: %s is neither a file, a directory nor a symlink; remove it from environment/", p, info.Mode().Type())
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].rel < entries[j].rel })
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = e.line
	}
	_, err = io.WriteString(w, "environment:\n"+strings.Join(lines, "\n")+"\n")
	return err
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
