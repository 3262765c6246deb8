// Package config is what `sandboxd serve` is told, and where each part of
// it came from: its flags, their SANDBOXD_ variables, the served task's
// task.toml and sandboxd.toml, and the defaults. The daemon runs what
// Configure makes of them; nothing here starts anything.
package config

import (
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/internal/control/wire"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// DefaultHarnessDir is where sandboxd keeps its own state inside an image.
const DefaultHarnessDir = wire.DefaultHarnessDir

// Config is everything `serve` is told.
type Config struct {
	HarnessDir    string
	Workdir       string   // "" means the image's workdir, else /
	AgentUser     string   // Docker-style user[:group]; "" is root
	AllowDegraded bool     // accept a sandbox weaker than declared, and say so everywhere
	AgentMaxProcs uint64   // RLIMIT_NPROC of a non-root agent user; 0: none
	HostMode      bool     // no container around us: mask the host's sockets too
	ReuseRootfs   bool     // serve on a root filesystem that has been an agent's (unsafe: development only)
	Bwrap         string   // bwrap binary; "" is bwrap on PATH
	ImageEnv      []string // the image's ENV; PATH defaults to Docker's
	AgentEnv      []string // the task's environment.env + agent.env
	Hide          []string // more paths absent from the sandbox (trial: the task dir)
	Devices       []string // devices to bind through when present
	Network       Network  // per-phase policies and peers
	// HealthPolicy is the network policy of the task's healthcheck: the
	// environment's own, the baseline both phases start from.
	HealthPolicy egress.Policy
	// RuntimeHosts are the hosts the harness added to Network at run time
	// (AllowRuntimeHosts), named apart from the task's own policy.
	RuntimeHosts RuntimeHosts
	SSH          SSH // the SSH door; its Listen "" turns it off
	// The served task, when there is one, and what follows from it.
	Task            *task.Task
	Tests           string // the task's tests directory, copied afresh for each grading
	VerifierUser    string
	VerifierEnv     []string // image env is added beneath
	VerifierTimeout time.Duration
	Entrypoint      []string // the image's ENTRYPOINT, run inside the sandbox at start
	ImageUser       string   // the image's USER, for the entrypoint

	// Settings are serve's settings and their sources, for status; the
	// ones given (a flag or a SANDBOXD_ variable) win over the task's.
	Settings Settings

	// Resolver resolves the names the proxies are asked for; nil is the
	// system's. Tests give a fake one.
	Resolver egress.Resolver
	// Upstream is the substrate's own proxy, from the environment serve
	// started in (HTTPS_PROXY, HTTP_PROXY, NO_PROXY); nil: none.
	Upstream *egress.Upstream
	Log      *slog.Logger
	// SpareThreads is how many OS threads serve makes at start (package
	// spare), made while its other steps run and all there before the
	// image's first program runs; 0: none.
	SpareThreads int
	// OnReady, when set, is called once everything serves (the control
	// socket, the SSH door, the network): trial waits for it.
	OnReady func()
}

// SSH is how the SSH door is set up.
type SSH struct {
	Listen         string // host:port in the substrate's network; "" disables SSH
	HostKey        string // a private key file; "" generates one into the harness dir
	AuthorizedKeys []byte // agent keys, OpenSSH authorized_keys format
	HarnessKeys    []byte // harness keys: control commands only, never a shell
	AcceptEnv      []string
	SessionTimeout time.Duration
}

// Network is the task's network declaration for both phases; the daemon
// holds its wiring, an egress.Wiring.
type Network = egress.Network

// Peer is a substrate service offered inside the sandbox under a name.
type Peer = egress.PeerSpec
