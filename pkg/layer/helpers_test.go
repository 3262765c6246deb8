package layer

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/layer/archive"
	"github.com/sandboxd/sandboxd/pkg/layer/engine"
)

// taskFiles are the files of a minimal valid task; tests add or replace some.
func taskFiles(from string) map[string]string {
	return map[string]string{
		"task.toml":              "schema_version = \"1.1\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 512\n",
		"instruction.md":         "Do the thing.\n",
		"tests/test.sh":          "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
		"solution/solve.sh":      "#!/bin/bash\ntrue\n",
		"environment/Dockerfile": "FROM " + from + "\nWORKDIR /app\n",
	}
}

// writeTask writes files (path → content; a content of "\x00" deletes the
// path from the set) into dir and returns dir.
func writeTask(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(p, []byte(content), mode))
		require.NoError(t, os.Chmod(p, mode))
	}
	return dir
}

// with returns a copy of m with the changes applied ("" deletes a key).
func with(m map[string]string, changes map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range changes {
		if v == "" {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// stubBinary writes the smallest ELF header CheckBinary accepts: a static
// executable for this machine's architecture.
func stubBinary(t *testing.T, dynamic bool) string {
	t.Helper()
	machine := map[string]uint16{"amd64": 62, "arm64": 183, "386": 3, "arm": 40, "ppc64le": 21, "s390x": 22, "riscv64": 243}[runtime.GOARCH]
	var hdr [64]byte
	copy(hdr[:], "\x7fELF")
	hdr[4], hdr[5], hdr[6] = 2, 1, 1           // 64-bit, little endian, version 1
	binary.LittleEndian.PutUint16(hdr[16:], 2) // ET_EXEC
	binary.LittleEndian.PutUint16(hdr[18:], machine)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	binary.LittleEndian.PutUint16(hdr[52:], 64) // ehsize
	binary.LittleEndian.PutUint16(hdr[54:], 56) // phentsize
	data := hdr[:]
	if dynamic {
		binary.LittleEndian.PutUint64(hdr[32:], 64) // phoff
		binary.LittleEndian.PutUint16(hdr[56:], 1)  // phnum
		var ph [56]byte
		binary.LittleEndian.PutUint32(ph[0:], 3) // PT_INTERP
		data = append(hdr[:], ph[:]...)
	}
	p := filepath.Join(t.TempDir(), "sandboxd")
	require.NoError(t, os.WriteFile(p, data, 0o755))
	return p
}

// fakeEngine is an Engine that keeps images in memory: builds make images
// with a fixed config, loads read the archive's manifest and configs.
type fakeEngine struct {
	mu        sync.Mutex
	images    map[string]*engine.Image // by ID and by tag
	n         int
	probe     string // what the probe prints; default: bwrap, bash, Harbor's tools and apt-get, no util-linux
	probeCode int
	after     string // what every probe after the first prints, when set (the tools were installed)
	runs      int
	failBuild map[string]*engine.BuildError // by a substring of BuildSpec.What
	loadErr   error
	partial   bool
	arch      string
	calls     []string
	builds    []engine.BuildSpec
	archives  []map[string][]byte
}

// harborAll is the probe's report of an image that has all of Harbor's agent tools.
const harborAll = "harbor python3 /usr/bin/python3\nharbor pip /usr/bin/pip3\nharbor git /usr/bin/git\nharbor curl /usr/bin/curl\n"

func newFakeEngine() *fakeEngine {
	return &fakeEngine{images: map[string]*engine.Image{}, partial: true, arch: runtime.GOARCH,
		probe: "tool bwrap /usr/bin/bwrap\ntool bash /bin/bash\n" + harborAll + "pm apt-get\nroot\nend\n"}
}

func (f *fakeEngine) Name() string               { return "fake 1.0" }
func (f *fakeEngine) LoadsPartialArchives() bool { return f.partial }

func (f *fakeEngine) add(img *engine.Image, refs ...string) {
	f.images[img.ID] = img
	for _, r := range refs {
		f.images[withTag(r)] = img
	}
}

func (f *fakeEngine) Inspect(_ context.Context, ref string) (*engine.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "inspect "+ref)
	img, ok := f.images[ref]
	if !ok {
		img, ok = f.images[withTag(ref)]
	}
	if !ok {
		return nil, fmt.Errorf("inspect %s: %w", ref, engine.ErrNoImage)
	}
	return img, nil
}

func (f *fakeEngine) History(context.Context, string) ([]engine.HistoryEntry, error) {
	return nil, fmt.Errorf("no history here")
}

func (f *fakeEngine) Pull(_ context.Context, ref string, _ io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "pull "+ref)
	return fmt.Errorf("pull access denied for %s", ref)
}

func (f *fakeEngine) Push(_ context.Context, ref string, _ io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "push "+ref)
	if img, ok := f.images[withTag(ref)]; ok {
		repo := ref[:strings.LastIndex(ref, ":")]
		img.RepoDigests = append(img.RepoDigests, repo+"@sha256:"+strings.Repeat("d", 64))
	}
	return nil
}

// baseConfig is the config every fake build produces: a non-root user, a
// workdir, an env and an entrypoint, so that the facts are visible.
func (f *fakeEngine) newImage(layers []string, cfg engine.ImageConfig) *engine.Image {
	f.n++
	raw := map[string]any{"User": cfg.User, "WorkingDir": cfg.WorkingDir, "Entrypoint": cfg.Entrypoint, "Env": cfg.Env, "Cmd": cfg.Cmd}
	return &engine.Image{ID: fmt.Sprintf("sha256:%064d", f.n), Architecture: f.arch, OS: "linux", Created: "2026-01-02T03:04:05Z",
		Size: int64(100e6 + f.n), Config: cfg, RawConfig: raw, Layers: layers}
}

func (f *fakeEngine) Build(_ context.Context, b engine.BuildSpec, log io.Writer) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "build "+b.What)
	f.builds = append(f.builds, b)
	for k, e := range f.failBuild {
		if strings.Contains(b.What, k) {
			return "", e
		}
	}
	fmt.Fprintln(log, "Step 1/1 : FROM somewhere")
	cfg := engine.ImageConfig{User: "app", WorkingDir: "/app", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
		Entrypoint: []string{"/docker-entrypoint.sh"}, Cmd: []string{"python3"}}
	layers := []string{"sha256:" + strings.Repeat("1", 64)}
	if parent, ok := f.images[b.Args["BASE"]]; ok {
		layers = append(append([]string{}, parent.Layers...), fmt.Sprintf("sha256:%064d", 900+f.n))
	}
	if parent, ok := f.images[b.Args["GROUP"]]; ok {
		layers = parent.Layers
	}
	img := f.newImage(layers, cfg)
	f.add(img, b.Tags...)
	return img.ID, nil
}

func (f *fakeEngine) Run(_ context.Context, image, _ string) (string, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "run "+image)
	f.runs++
	if f.runs > 1 && f.after != "" {
		return f.after, 0, nil
	}
	return f.probe, f.probeCode, nil
}

func (f *fakeEngine) Load(_ context.Context, archivePath string, _ io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "load")
	if f.loadErr != nil {
		return f.loadErr
	}
	files, err := readTar(archivePath)
	if err != nil {
		return err
	}
	f.archives = append(f.archives, files)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		return err
	}
	for _, e := range manifest {
		var c archive.Config
		if err := json.Unmarshal(files[e.Config], &c); err != nil {
			return err
		}
		sum := sha256.Sum256(files[e.Config])
		img := &engine.Image{ID: "sha256:" + hex.EncodeToString(sum[:]), Architecture: c.Architecture, OS: c.OS, Created: c.Created,
			Size: int64(100e6 + 8e6), RawConfig: c.Config, Layers: c.RootFS.DiffIDs}
		b, _ := json.Marshal(c.Config)
		_ = json.Unmarshal(b, &img.Config)
		f.add(img, e.RepoTags...)
	}
	return nil
}

func readTar(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			out[h.Name] = b
		}
	}
}
