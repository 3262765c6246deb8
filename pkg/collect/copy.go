package collect

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/beneath"
)

// maxSkipped bounds the skipped entries reported per artifact.
const maxSkipped = 20

// errBudget ends a copy at the collection's bounds.
var errBudget = errors.New("the collection's bound was reached")

// copier copies one artifact; budget is the whole collection's.
type copier struct {
	art     *Artifact
	budget  *Limits
	exclude []string
}

// copyArtifacts copies every artifact, in order, beneath the sandbox's root
// into dir. The message says why the collection stopped short, if it did.
func copyArtifacts(cfg Config, dir string, log *slog.Logger) ([]Artifact, string) {
	out := make([]Artifact, 0, len(cfg.Artifacts))
	fail := func(msg string) ([]Artifact, string) {
		for _, a := range cfg.Artifacts {
			_, dst := destination(a, cfg.Workdir)
			out = append(out, Artifact{Source: a.Source, Destination: dst, Status: StatusFailed, Error: msg})
		}
		return out, msg
	}
	root, err := unix.Open(cfg.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Sprintf("open the sandbox's root %s: %v", cfg.Root, err))
	}
	defer unix.Close(root)
	into, err := beneath.OpenDir(dir, unix.O_PATH)
	if err != nil {
		return fail(fmt.Sprintf("open the collection's directory: %v", err))
	}
	defer unix.Close(into)
	budget := cfg.Limits
	var msg string
	for _, a := range cfg.Artifacts {
		src, dst := destination(a, cfg.Workdir)
		res := Artifact{Source: a.Source, Destination: dst}
		if err := copyOne(root, into, src, dst, &copier{art: &res, budget: &budget, exclude: a.Exclude}); err != nil {
			res.Error = err.Error()
			if errors.Is(err, errBudget) {
				msg = fmt.Sprintf("stopped at %d bytes or %d entries: the rest is not collected", cfg.Limits.Bytes, cfg.Limits.Entries)
			}
		}
		switch {
		case res.Status != "":
		case res.Files == 0 && (res.Error != "" || len(res.Skipped) > 0):
			res.Status = StatusFailed
		case res.Error != "" || len(res.Skipped) > 0:
			res.Status = StatusPartial
		default:
			res.Status = StatusCollected
		}
		log.Info("collect: artifact", "source", a.Source, "destination", dst, "status", res.Status, "files", res.Files, "bytes", res.Bytes)
		out = append(out, res)
	}
	return out, msg
}

// copyOne opens src beneath root (absolute in the sandbox's view) and
// copies it to dst beneath into, making dst's parents.
func copyOne(root, into int, src, dst string, c *copier) error {
	rel := strings.TrimPrefix(src, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := beneath.Open(root, rel, unix.O_PATH)
	switch {
	case errors.Is(err, unix.ENOENT):
		c.art.Status = StatusMissing
		return fmt.Errorf("%s does not exist", src)
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%s: a symlink on the way, not followed", src)
	case err != nil:
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer unix.Close(fd)
	parent := into
	parts := strings.Split(dst, "/")
	for _, p := range parts[:len(parts)-1] {
		next, err := mkdirBeneath(parent, p)
		if parent != into {
			unix.Close(parent)
		}
		if err != nil {
			return fmt.Errorf("make the destination %s: %w", dst, err)
		}
		parent = next
	}
	if parent != into {
		defer unix.Close(parent)
	}
	return c.entry(fd, parent, parts[len(parts)-1], "")
}

// mkdirBeneath makes (or finds) the directory name in dirfd and opens it,
// following no symlink.
func mkdirBeneath(dirfd int, name string) (int, error) {
	if err := unix.Mkdirat(dirfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return beneath.Open(dirfd, name, unix.O_PATH|unix.O_DIRECTORY)
}

// entry copies what fd (an O_PATH descriptor, never a symlink followed) is
// open on to name in dstDir. rel is its path below the artifact's source,
// for exclude patterns and messages.
func (c *copier) entry(fd, dstDir int, name, rel string) error {
	if c.budget.Entries <= 0 {
		return errBudget
	}
	c.budget.Entries--
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return c.file(fd, dstDir, name, st)
	case unix.S_IFDIR:
		return c.dir(fd, dstDir, name, rel)
	case unix.S_IFLNK:
		c.skip(rel, "a symlink, not followed")
	default:
		c.skip(rel, "not a regular file or a directory")
	}
	return nil
}

// reopen opens what an O_PATH descriptor is open on for reading. The
// descriptor pins the inode, so this is the object that was looked at, not
// whatever the agent has put under its name since; O_NONBLOCK and O_NOCTTY
// are there in case it is not what fstat said.
func reopen(fd, flags int) (int, error) {
	return unix.Open(beneath.FDPath(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC|flags, 0)
}

func (c *copier) file(fd, dstDir int, name string, st unix.Stat_t) error {
	rfd, err := reopen(fd, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(rfd), name)
	defer src.Close()
	wfd, err := unix.Openat(dstDir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, st.Mode&0o755|0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	dst := os.NewFile(uintptr(wfd), name)
	defer dst.Close()
	n, err := io.Copy(dst, io.LimitReader(src, c.budget.Bytes+1))
	if n > c.budget.Bytes {
		dst.Truncate(c.budget.Bytes)
		n = c.budget.Bytes
		err = errBudget
	}
	c.budget.Bytes -= n
	c.art.Bytes += n
	c.art.Files++
	return err
}

func (c *copier) dir(fd, dstDir int, name, rel string) error {
	rfd, err := reopen(fd, unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	// One more name than the budget has room for: enough to know that it
	// runs out here, never a listing of all the agent made.
	names, err := beneath.ReadDirNamesAtMost(rfd, max(c.budget.Entries, 0)+1)
	if err != nil {
		return err
	}
	into, err := mkdirBeneath(dstDir, name)
	if err != nil {
		return fmt.Errorf("make %s: %w", name, err)
	}
	defer unix.Close(into)
	for _, n := range names {
		childRel := path.Join(rel, n)
		if c.excluded(childRel) {
			continue
		}
		child, err := beneath.Open(rfd, n, unix.O_PATH)
		if err != nil {
			c.skip(childRel, err.Error())
			continue
		}
		err = c.entry(child, into, n, childRel)
		unix.Close(child)
		if errors.Is(err, errBudget) {
			return err
		}
		if err != nil {
			c.skip(childRel, err.Error())
		}
	}
	return nil
}

// excluded reports whether an exclude pattern matches the entry's name or
// its path below the source, as tar --exclude does.
func (c *copier) excluded(rel string) bool {
	for _, p := range c.exclude {
		if ok, _ := path.Match(p, path.Base(rel)); ok {
			return true
		}
		if ok, _ := path.Match(strings.TrimPrefix(p, "./"), rel); ok {
			return true
		}
	}
	return false
}

func (c *copier) skip(rel, why string) {
	if rel == "" {
		rel = "."
	}
	if len(c.art.Skipped) < maxSkipped {
		c.art.Skipped = append(c.art.Skipped, rel+": "+why)
	} else if len(c.art.Skipped) == maxSkipped {
		c.art.Skipped = append(c.art.Skipped, "… more not listed")
	}
}

// Move puts a finished collection at dst, which must not exist or be an
// empty directory: by rename, else (another filesystem) by a copy made as
// the collection was, then the original removed. trial uses it to keep a
// collection past its harness dir.
func Move(src, dst string) error {
	dst, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("keep the artifacts at %s: it must be a new or empty directory: %w", dst, err)
	}
	err = os.Rename(src, dst)
	if !errors.Is(err, unix.EXDEV) {
		return err
	}
	parent, err := beneath.OpenDir(path.Dir(path.Clean(dst)), unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	root, err := beneath.OpenDir(src, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	var art Artifact
	budget := Limits{Bytes: 1 << 62, Entries: 1 << 30}
	if err := (&copier{art: &art, budget: &budget}).entry(root, parent, path.Base(dst), ""); err != nil {
		return err
	}
	if len(art.Skipped) > 0 {
		return fmt.Errorf("keep the artifacts at %s: %s", dst, strings.Join(art.Skipped, "; "))
	}
	return os.RemoveAll(src)
}
