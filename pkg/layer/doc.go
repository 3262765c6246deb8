// Package layer is `sandboxd adapt`: it turns Harbor task directories into
// container images that carry sandboxd and serve their task.
//
// The work splits in two halves so that most of it is testable without a
// container engine:
//
//   - Planning (Plan): load every task with pkg/task, refuse the ones sandboxd
//     cannot serve (by name, with the reason), and group the rest by a content
//     hash of environment/ plus the settings the container runtime applies
//     (EnvHash). Tasks in one group share one image.
//   - Building (Adapt): for each group, build or take the base, read its
//     config, check for bubblewrap and for the tools Harbor's agents expect
//     (installing what is missing with the image's own package manager, in
//     one step), and add the serving
//     layer: the static sandboxd binary, the tasks' task.toml, instruction.md,
//     tests/ and a sandboxd.toml holding the image facts, under the harness
//     dir /media/sandboxd. Each task then gets a config-only image over the
//     same layers whose command names it.
//
// With Docker the serving layer and the per-task images are assembled as an
// image archive and handed to `docker load` (the base's layers are referenced,
// not copied), because the classic builder spends one container per Dockerfile
// instruction — seconds each on fuse-overlayfs. Where the engine refuses such an
// archive (podman, containerd image stores), and for --out, the same Layer is
// rendered as a Dockerfile build context instead; one description feeds both.
//
// The engine is driven through its CLI (docker, or podman where that is what is
// installed) by pkg/layer/engine: no SDK dependency, and what adapt does can
// be repeated by hand from the progress it prints.
package layer
