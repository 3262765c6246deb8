package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/pkg/kube"
	"github.com/sandboxd/sandboxd/pkg/layer"
)

func runAdapt(ctx context.Context, args []string) int {
	fs := flags("adapt", "TASK_DIR... [--tag PREFIX] [--out DIR] [--push] [--json] [--compose-dir DIR] [--no-harbor-tools|--require-harbor-tools]")
	prefix := fs.String("tag", layer.DefaultPrefix, "the image repository `PREFIX`: PREFIX/<dataset>-<hash12> per group, PREFIX/<dataset>:<task> per task")
	out := fs.String("out", "", "write build contexts and build.sh to `DIR` and build nothing")
	push := fs.Bool("push", false, "push every image made")
	asJSON := fs.Bool("json", false, "print the manifest as one JSON document on stdout")
	composeDir := fs.String("compose-dir", "sandboxd-compose", "the `DIR` where compose files for compose tasks go (with --out: DIR/compose)")
	k8s := fs.String("k8s", "", "also write each task's Kubernetes Pod, Job, SandboxTemplate and SandboxWarmPool to `DIR` (docs/kubernetes.md)")
	noHarbor := fs.Bool("no-harbor-tools", false, "do not bake the tools Harbor's agents expect (python3, pip, git, curl), for harnesses that provision their own")
	requireHarbor := fs.Bool("require-harbor-tools", false, "refuse an image on which python3, pip, git or curl cannot be provided (no package manager)")
	// Flags may follow the task directories, as the synopsis writes them.
	var dirs []string
	for {
		if ok, code := parse(fs, args); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		dirs = append(dirs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(dirs) == 0 {
		return usageError(fs, "name at least one task directory (or a directory of tasks)")
	}
	if *noHarbor && *requireHarbor {
		return usageError(fs, "--no-harbor-tools and --require-harbor-tools contradict each other: give one")
	}
	harbor := layer.HarborToolsBake
	switch {
	case *noHarbor:
		harbor = layer.HarborToolsOff
	case *requireHarbor:
		harbor = layer.HarborToolsRequire
	}
	if *push && *out != "" {
		return fail("adapt: --push builds nothing to push with --out; run PUSH=1 %s/build.sh instead", *out)
	}
	self, err := os.Executable()
	if err != nil {
		return fail("adapt: find the sandboxd binary to bake in: %v", err)
	}
	m, err := layer.Adapt(ctx, dirs, layer.Options{
		Prefix:      *prefix,
		Out:         *out,
		ComposeDir:  *composeDir,
		Push:        *push,
		Binary:      self,
		Version:     daemon.Version,
		Seccomp:     findSeccompProfile(self),
		Log:         os.Stderr,
		HarborTools: harbor,
	})
	if *k8s != "" && len(m.Tasks) > 0 {
		files, kerr := kube.Write(*k8s, m, kube.Options{Version: daemon.Version, Seccomp: findSeccompProfile(self)})
		if kerr != nil && err == nil {
			err = kerr
		}
		fmt.Fprintf(os.Stderr, "sandboxd: adapt: %d Kubernetes file(s) under %s\n", len(files), *k8s)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(m, "", "  ")
		fmt.Println(string(b))
		m.WriteTable(os.Stderr)
	} else {
		m.WriteTable(os.Stdout)
	}
	for _, e := range m.Errors {
		if err != nil && e.Error == err.Error() {
			continue // said once below, not once per task
		}
		fmt.Fprintf(os.Stderr, "sandboxd: adapt: %s: %s\n", e.Dir, e.Error)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd: adapt: %v\n", err)
		return 1
	}
	if !m.OK() {
		return 1
	}
	return 0
}

// findSeccompProfile looks for images/seccomp.json where a checkout or a
// release tarball puts it: $SANDBOXD_SECCOMP_PROFILE, next to bin/, or in
// the working directory.
func findSeccompProfile(self string) string {
	cands := []string{os.Getenv("SANDBOXD_SECCOMP_PROFILE"),
		filepath.Join(filepath.Dir(filepath.Dir(self)), "images", "seccomp.json"),
		filepath.Join("images", "seccomp.json")}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c
		}
	}
	return ""
}
