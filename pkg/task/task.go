package task

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Task is one Harbor task as sandboxd serves it: task.toml's values with
// Harbor's defaults applied, the files around it, sandboxd.toml's additions,
// and the per-phase views the daemon uses.
type Task struct {
	Dir  string // the directory given to Load; "" after Parse
	Name string // the directory's base name, which `serve --task NAME` and SANDBOXD_TASK select; "" after Parse

	SchemaVersion string         // schema_version, or legacy version, as written; "" when the file has neither
	Source        string         // source
	Artifacts     []Artifact     // artifacts: paths collected after the run
	Info          Info           // [task]
	Metadata      map[string]any // [metadata], free-form, as decoded
	Verifier      Verifier       // [verifier]
	Agent         Agent          // [agent]
	Environment   Environment    // [environment]
	Solution      Solution       // [solution]

	Instruction    string // instruction.md, the prompt
	TestScript     string // path of tests/test.sh (always present after Load; it may lack the x bit: graders chmod it)
	SolutionScript string // path of solution/solve.sh; "" when the task has none
	Dockerfile     string // path of environment/Dockerfile; "" when absent
	ComposeFile    string // path of environment/docker-compose.yaml; "" when absent (adapt reads it)
	SandboxdFile   string // path of sandboxd.toml; "" when absent
	Sandboxd       Sandboxd

	Warnings []string // "FILE:LINE: what" for unknown keys and other things that were ignored

	agentNet, verifierNet                       Network
	baseEnv, agentEnv, verifierEnv, solutionEnv Env
	envPos                                      map[string]map[string]Pos
}

// Info is the [task] section: the task's package identity.
type Info struct {
	Name        string   // "org/name"
	Version     string   // version: the task package's version, any non-empty string
	Description string   // one paragraph
	Authors     []Author // authors
	Keywords    []string // keywords
}

// Author is one entry of [task].authors: a table {name, email} or a bare name.
type Author struct {
	Name  string
	Email string
}

// Artifact is one entry of the top-level artifacts list: a path, or a table.
type Artifact struct {
	Source      string   // path in the environment
	Destination string   // path under the trial's artifacts directory; "" = derived from Source
	Exclude     []string // patterns left out of a directory
	Service     string   // compose service: "" or "main" (a sidecar's is refused)
}

// CollectHook is one [[verifier.collect]] entry: a command run after the
// verifier, before the artifacts are collected, to snapshot state into
// files that artifacts can name.
type CollectHook struct {
	Command string        // command, run with bash -c
	Service string        // service: "main" (a sidecar's is refused)
	Timeout time.Duration // timeout_sec; default 60 s
	User    string        // user; "" = the verifier's
}

// DefaultCollectTimeout is Harbor's timeout of a collect hook.
const DefaultCollectTimeout = 60 * time.Second

// Verifier is the [verifier] section.
type Verifier struct {
	Timeout      time.Duration // timeout_sec; default 10 minutes
	Env          Env           // env, as written (see Task.VerifierEnv for the expanded view)
	User         string        // user ("name", "uid", "uid:gid", ...); "" = the image's USER
	NetworkMode  NetworkMode   // network_mode; "" = inherit the environment's (see Task.VerifierNetwork)
	AllowedHosts []string      // allowed_hosts, normalised
	Collect      []CollectHook // [[verifier.collect]], in file order
}

// Agent is the [agent] section.
type Agent struct {
	Timeout      time.Duration // timeout_sec; 0 = no timeout (Harbor's default)
	Env          Env           // env, as written (read by adapters such as HUD's)
	User         string        // user; "" = the image's USER
	NetworkMode  NetworkMode   // network_mode; "" = inherit the environment's (see Task.AgentNetwork)
	AllowedHosts []string      // allowed_hosts, normalised
}

// Environment is the [environment] section.
type Environment struct {
	BuildTimeout time.Duration // build_timeout_sec; default 10 minutes
	DockerImage  string        // docker_image; "" = build environment/
	OS           string        // os; always "linux" (Windows is refused)
	Workdir      string        // workdir; "" = the image's WORKDIR
	CPUs         float64       // cpus; 0 = not declared
	MemoryMB     int64         // memory_mb, or legacy memory = "2G" converted; 0 = not declared
	StorageMB    int64         // storage_mb, or legacy storage = "10G" converted; 0 = not declared
	GPUs         int64         // gpus; 0 = none
	GPUTypes     []string      // gpu_types; nil = any
	Env          Env           // env, as written, possibly with ${VAR:-default} templates
	Healthcheck  *Healthcheck  // healthcheck; nil when absent
	NetworkMode  NetworkMode   // network_mode, else legacy allow_internet, else "public": never ""
	AllowedHosts []string      // allowed_hosts, normalised
}

// Healthcheck is [environment.healthcheck], mirroring Docker's HEALTHCHECK.
type Healthcheck struct {
	Command       string        // command, run with bash -c
	Interval      time.Duration // interval_sec; default 5 s
	Timeout       time.Duration // timeout_sec; default 30 s
	StartPeriod   time.Duration // start_period_sec; default 0
	StartInterval time.Duration // start_interval_sec; default 5 s
	Retries       int64         // retries: consecutive failures that make it unhealthy; default 3
}

// Solution is the [solution] section.
type Solution struct {
	Env Env // env, as written
}

// Harbor's defaults.
const (
	DefaultVerifierTimeout = 600 * time.Second
	DefaultBuildTimeout    = 600 * time.Second
)

// DefaultUser is the user of a phase when neither the task nor the image names
// one: uid 0, as Docker runs an image without USER.
const DefaultUser = "0"

// AgentNetwork is the agent phase's policy: [agent]'s own, else the environment's.
func (t *Task) AgentNetwork() Network { return t.agentNet }

// VerifierNetwork is the verify phase's policy: [verifier]'s own, else the environment's.
func (t *Task) VerifierNetwork() Network { return t.verifierNet }

// Workdir is where sessions and the verifier start: the task's workdir, else
// the image's WORKDIR, else "/".
func (t *Task) Workdir() string {
	switch {
	case t.Environment.Workdir != "":
		return t.Environment.Workdir
	case t.Sandboxd.ImageWorkdir != "":
		return t.Sandboxd.ImageWorkdir
	}
	return "/"
}

// AgentUser is the user agent sessions run as: [agent].user, else the image's USER, else DefaultUser.
func (t *Task) AgentUser() string { return t.phaseUser(t.Agent.User) }

// VerifierUser is the user test.sh runs as: [verifier].user, else the image's USER, else DefaultUser.
func (t *Task) VerifierUser() string { return t.phaseUser(t.Verifier.User) }

func (t *Task) phaseUser(u string) string {
	switch {
	case u != "":
		return u
	case t.Sandboxd.ImageUser != "":
		return t.Sandboxd.ImageUser
	}
	return DefaultUser
}

// The files of a Harbor task directory, relative to it, slash-separated.
const (
	PathTaskTOML     = "task.toml"
	PathInstruction  = "instruction.md"
	PathSandboxdTOML = "sandboxd.toml"
	PathTestScript   = "tests/test.sh"
	PathSolveScript  = "solution/solve.sh"
	PathDockerfile   = "environment/Dockerfile"
	PathCompose      = "environment/docker-compose.yaml"
	PathSteps        = "steps"
)

// Load reads the task in dir: task.toml, instruction.md and the optional
// sandboxd.toml, and checks that tests/test.sh exists. It only reads; env
// templates are resolved against an empty host until ExpandEnv is called.
func Load(dir string) (*Task, error) {
	join := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }

	tomlPath := join(PathTaskTOML)
	data, err := os.ReadFile(tomlPath)
	if err != nil {
		return nil, missing(tomlPath, err, "is this a Harbor task directory? It needs task.toml, instruction.md and tests/test.sh")
	}
	t, err := Parse(tomlPath, data)
	if err != nil {
		return nil, err
	}
	t.Dir = dir
	t.Name = filepath.Base(filepath.Clean(dir))
	if abs, err := filepath.Abs(dir); err == nil {
		t.Name = filepath.Base(abs) // "." names the directory, not "."
	}

	var errs []error
	if fi, err := os.Stat(join(PathSteps)); err == nil && fi.IsDir() {
		errs = append(errs, &UnsupportedError{Pos: Pos{File: join(PathSteps)}, Feature: "multi-step tasks",
			Reason: "a steps/ directory means several agent and verifier rounds; sandboxd serves one agent phase and one verify phase per rollout. Serve each step as its own task"})
	}

	if b, err := os.ReadFile(join(PathInstruction)); err != nil {
		errs = append(errs, missing(join(PathInstruction), err, "write the prompt for the agent there"))
	} else {
		t.Instruction = string(b)
	}

	t.TestScript = join(PathTestScript)
	if fi, err := os.Stat(t.TestScript); err != nil {
		errs = append(errs, missing(t.TestScript, err, "every Harbor task needs its verifier there; it writes /logs/verifier/reward.txt or reward.json"))
	} else if !fi.Mode().IsRegular() {
		errs = append(errs, &FieldError{Pos: Pos{File: t.TestScript}, Msg: "is not a regular file: make tests/test.sh the verifier script"})
	}

	t.SolutionScript = existing(join(PathSolveScript))
	t.Dockerfile = existing(join(PathDockerfile))
	t.ComposeFile = existing(join(PathCompose))
	if t.ComposeFile == "" {
		if yml := existing(join("environment/docker-compose.yml")); yml != "" {
			t.Warnings = append(t.Warnings, yml+": ignored: Harbor reads only environment/docker-compose.yaml; rename it if the task needs it")
		}
	}

	sbPath := join(PathSandboxdTOML)
	if b, err := os.ReadFile(sbPath); err == nil {
		sb, warns, err := ParseSandboxd(sbPath, b)
		if err != nil {
			errs = append(errs, err)
		} else {
			if sb.AuthorizedKeys != "" && !filepath.IsAbs(sb.AuthorizedKeys) {
				sb.AuthorizedKeys = filepath.Join(dir, sb.AuthorizedKeys)
			}
			t.Sandboxd = *sb
			t.SandboxdFile = sbPath
			t.Warnings = append(t.Warnings, warns...)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, &FieldError{Pos: Pos{File: sbPath}, Msg: "cannot be read: " + err.Error(), Err: err})
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

func missing(path string, err error, hint string) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &FieldError{Pos: Pos{File: path}, Msg: "missing: " + hint, Err: err}
	}
	return &FieldError{Pos: Pos{File: path}, Msg: fmt.Sprintf("cannot be read (%v): %s", err, hint), Err: err}
}

// existing returns path when a regular file is there, else "".
func existing(path string) string {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return path
	}
	return ""
}
