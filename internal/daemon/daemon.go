// Package daemon is `sandboxd serve`: it owns the holder, the control socket,
// the sessions and the phases of one rollout, and stops them all together.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/cgroup"
	"github.com/sandboxd/sandboxd/internal/cleanup"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/harness"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/reaper"
	"github.com/sandboxd/sandboxd/internal/records"
	"github.com/sandboxd/sandboxd/internal/spare"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
	"github.com/sandboxd/sandboxd/pkg/netrules"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
	"github.com/sandboxd/sandboxd/pkg/sshd"
)

// Version is sandboxd's release, set at build time.
var Version = "dev"

// Daemon is a running `serve`.
type Daemon struct {
	cfg    config.Config
	log    *slog.Logger
	holder *bwrap.Holder
	limits limits
	// cgroup holds the agent's processes, when one could be made; else
	// cgroupNote says why not.
	cgroup     *cgroup.Group
	cgroupNote string
	// reserved is the room set aside for grading now (reserve.go).
	reserved atomic.Int64
	target   join.Target
	agent    idmap.User
	// users are the image's users as serve found them at start, before any
	// agent code ran: the phases' users and every exec -u are resolved
	// against them, never against the files the agent can rewrite.
	users *idmap.Users
	// hostSockets are, on a bare host, the host's sockets as serve found
	// them at start: masked in the sandbox and in every visitor's view.
	hostSockets []string
	// rules are the network rules inside the sandbox, kept for adding to
	// their answered set.
	rules *netrules.Rules
	// spareMade waits for serve's spare threads (package spare).
	spareMade func()
	// sshKeys waits for the SSH door's keys (loadSSHKeysAhead); nil
	// without the door.
	sshKeys func() (sshKeys, error)

	started time.Time
	stop    context.CancelFunc
	// down is the shutdown of everything built so far, newest first: start
	// begins it, serve continues it, and it runs once, however serve ends.
	down       cleanup.Cleanup
	holderOnce sync.Once
	warnings   []string
	// verifier and imageUser are resolved at start, like the agent.
	verifier, imageUser idmap.User
	logsDev, logsIno    uint64
	// net is the sandbox's network: the peers, the agent's network files,
	// the listeners, the visits.
	net *egress.Wiring
	// visitorHosts is the hosts file with the peers that visitors (the
	// verifier, the healthcheck) get, so they resolve the names the agent does.
	visitorHosts string
	// visitorResolv is the sandbox's resolv.conf for the visitors' views.
	visitorResolv string
	ssh           *sshDoor
	serveCtx      context.Context // ends when serve stops; work that outlives a client uses it
	// leftovers keeps reading the output of background processes that
	// outlive their exec, so they never die of SIGPIPE.
	leftovers *ptyrelay.Leftovers
	// recs is the record of every session, for both doors (records.go).
	recs *records.Log
	// memoryPeak is the highest memory total status.usage has seen.
	memoryPeak atomic.Int64

	// gradeMu makes gradings take turns for the room set aside for them.
	gradeMu    sync.Mutex
	mu         sync.Mutex
	sessions   map[int]*session
	nextID     int
	phase      string // agent or verify
	entrypoint string // the image entrypoint's state, "" when there is none
	// healthState is starting, healthy or unhealthy; "" without a healthcheck.
	healthState, healthOutput string
	healthPassed              bool // it has been healthy once: Harbor's gate before the agent phase
}

type session struct {
	ID      int       `json:"id"`
	Argv    []string  `json:"argv"`
	User    uint32    `json:"uid"`
	PID     int       `json:"pid"`
	TTY     bool      `json:"tty"`
	Started time.Time `json:"started"`
	Via     string    `json:"via"`
}

// Status is what `sandboxd status` prints.
type Status struct {
	Version      string          `json:"version"`
	Phase        string          `json:"phase"`
	Task         string          `json:"task,omitempty"`
	Entrypoint   string          `json:"entrypoint,omitempty"`
	Health       string          `json:"health,omitempty"`
	HealthOutput string          `json:"health_output,omitempty"` // the last check's output
	Network      netStatus       `json:"network"`
	SSH          *sshStatus      `json:"ssh,omitempty"`
	HarnessDir   string          `json:"harness_dir"`
	Workdir      string          `json:"workdir"`
	AgentUser    userStatus      `json:"agent_user"`
	Sandbox      sandboxSt       `json:"sandbox"`
	Degradations []string        `json:"degradations"`
	Sessions     []session       `json:"sessions"`
	Limits       limits          `json:"limits"`
	Usage        *Usage          `json:"usage"`
	Uptime       float64         `json:"uptime_sec"`
	Settings     config.Settings `json:"settings,omitempty"`
}

type sshStatus struct {
	Listen   string             `json:"listen"`
	HostKey  string             `json:"host_key"`
	Sessions []sshd.SessionInfo `json:"sessions"`
}

type netStatus struct {
	Agent    string   `json:"agent"`
	Verifier string   `json:"verifier"`
	Peers    []string `json:"peers,omitempty"`
	// RuntimeHosts are the hosts the harness added at run time, apart
	// from the task's own policy.
	RuntimeHosts *config.RuntimeHosts `json:"runtime_hosts,omitempty"`
	// UpstreamProxy is the substrate's own proxy, when the egress goes
	// through one.
	UpstreamProxy *egress.UpstreamStatus `json:"upstream_proxy,omitempty"`
}

type userStatus struct {
	Name string `json:"name,omitempty"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
}

type sandboxSt struct {
	PID        int      `json:"pid"`
	Bwrap      string   `json:"bwrap"`
	BwrapPath  string   `json:"bwrap_path"`
	IDMap      string   `json:"id_map"`
	UIDMap     string   `json:"uid_map"` // "0 0 65536" in a user namespace of 65,536 ids (hostUsers: false)
	GIDMap     string   `json:"gid_map"`
	Namespaces []string `json:"namespaces"`
}

// Run builds the sandbox, serves until ctx ends or a stop request comes, and
// tears everything down. It fails closed: if the sandbox cannot be built as
// declared, or the holder dies, it returns an error.
func Run(ctx context.Context, cfg config.Config) error {
	d, err := start(ctx, cfg)
	if err != nil {
		return err
	}
	return d.serve(ctx)
}

func start(ctx context.Context, cfg config.Config) (*Daemon, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.HarnessDir == "" {
		cfg.HarnessDir = config.DefaultHarnessDir
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	cfg.HarnessDir = filepath.Clean(cfg.HarnessDir)
	if err := resolveHidden(&cfg); err != nil {
		return nil, err
	}
	// Harbor's default is public; a phase without its own policy inherits.
	if cfg.Network.Agent.Mode == "" {
		cfg.Network.Agent.Mode = egress.Public
	}
	if cfg.Network.Verifier.Mode == "" {
		cfg.Network.Verifier = cfg.Network.Agent
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, sessions: map[int]*session{}, started: time.Now(), leftovers: &ptyrelay.Leftovers{}}
	// Steps that wait (for threads, for the disk) run beside the others:
	// the spare threads here, the SSH keys below
	// (docs/failures.md#serves-start-does-its-waiting-side-by-side).
	d.spareMade = spare.Begin(cfg.SpareThreads)

	users, err := idmap.ReadUsers("/")
	if err != nil {
		return nil, fmt.Errorf("read the image's users: %w", err)
	}
	d.users = users
	if cfg.HostMode {
		d.hostSockets = masks.HostSockets()
	}
	agent, err := users.Lookup(cfg.AgentUser)
	if err != nil {
		return nil, fmt.Errorf("agent user: %w", err)
	}
	d.agent = agent
	if d.net, err = egress.Plan(cfg.Network); err != nil {
		return nil, err
	}

	runDir := filepath.Join(cfg.HarnessDir, "run")
	if err := harness.Prepare(cfg.HarnessDir); err != nil {
		return nil, err
	}
	if hosts := d.net.Hosts(); hosts != nil {
		d.visitorHosts = filepath.Join(runDir, "hosts")
		if err := os.WriteFile(d.visitorHosts, hosts, 0o644); err != nil {
			return nil, fmt.Errorf("write the visitors' hosts file: %w", err)
		}
	}
	if err := d.writeVisitorResolvConf(runDir); err != nil {
		return nil, err
	}
	lock, err := harness.Lock(runDir)
	if err != nil {
		return nil, err
	}
	cu := cleanup.Make(func() { lock.Close() })
	defer cu.Clean()
	// A crashed earlier run may have left its socket
	// (docs/failures.md#stop-leaves-nothing-behind); the lock says it is gone.
	os.Remove(control.Socket(cfg.HarnessDir))
	// Before any program of the image runs: once an agent has had this
	// root filesystem, they may be its.
	reused, err := harness.CheckRootfs(cfg.HarnessDir, cfg.ReuseRootfs, cfg.HostMode)
	if err != nil {
		return nil, err
	}
	for _, r := range reused {
		cfg.Log.Warn("sandbox degraded", "why", r)
	}
	if d.sshKeys = d.loadSSHKeysAhead(); d.sshKeys != nil {
		// A start that fails lets the keys' files be written first.
		cu.Add(func() { d.sshKeys() })
	}

	// /logs/verifier is masked by an empty tmpfs; create the mount point in
	// the substrate so bwrap does not have to write into the shared tree, and
	// remember which directory it is (see grade.Config.LogsDirDev).
	if err := os.MkdirAll("/logs/verifier", 0o755); err != nil {
		return nil, fmt.Errorf("create /logs/verifier: %w", err)
	}
	var logsSt unix.Stat_t
	if err := unix.Stat("/logs/verifier", &logsSt); err != nil {
		return nil, fmt.Errorf("stat /logs/verifier: %w", err)
	}
	d.logsDev, d.logsIno = logsSt.Dev, logsSt.Ino
	// What the daemon runs later is pinned before any agent code has run in
	// the filesystem the sandbox shares: while bwrap builds the sandbox, in
	// which nothing of the agent's runs before the pin is awaited below.
	// Where the kernel keeps the running binary from being written, the
	// pin holds it and serve makes the sealed copy once it serves.
	pinned := make(chan error, 1)
	go func() { pinned <- join.Pin() }()
	// So were the users of the phases, in the snapshot taken above.
	if d.verifier, err = users.Lookup(cfg.VerifierUser); err != nil {
		return nil, fmt.Errorf("verifier user: %w", err)
	}
	if d.imageUser, err = users.Lookup(cfg.ImageUser); err != nil {
		return nil, fmt.Errorf("image user: %w", err)
	}
	mask := []string{"/logs/verifier"}
	var warnings []string
	if entries, err := os.ReadDir("/tests"); err == nil && len(entries) > 0 {
		// Under Harbor /tests appears only when grading starts. An image that
		// carries its own tests there cannot have them made absent (/tests
		// sits at the root): they are masked, and that is said. An empty
		// /tests is a grader's passing mount point (another sandbox on this
		// machine grading): masking it would make bwrap create the mount
		// point in the shared filesystem should the grader remove it first.
		mask = append(mask, "/tests")
		warnings = append(warnings, "the image has a /tests directory: it is masked by an empty directory, not absent")
	}
	holder, err := bwrap.Start(ctx, bwrap.Config{
		Bwrap:         cfg.Bwrap,
		Workdir:       cfg.Workdir,
		Hide:          append([]string{cfg.HarnessDir}, cfg.Hide...),
		Mask:          mask,
		Devices:       cfg.Devices,
		Files:         agentFiles(d.net),
		HostSockets:   d.hostSockets,
		AllowDegraded: cfg.AllowDegraded,
		Log:           cfg.Log,
	})
	if perr := <-pinned; perr != nil {
		if err == nil {
			holder.Kill()
		}
		return nil, perr
	}
	if err != nil {
		return nil, fmt.Errorf("build the sandbox: %w", err)
	}
	d.holder = holder
	cu.Add(d.killHolder)
	d.warnings = append(warnings, reused...)
	d.target = join.Target{PID: holder.PID, Namespaces: holder.Namespaces,
		Limits: join.Limits{OOMScoreAdj: sessionOOMScoreAdj, MaxProcs: cfg.AgentMaxProcs}}
	if err := d.target.Hold(); err != nil {
		return nil, fmt.Errorf("build the sandbox: %w", err)
	}
	cu.Add(d.target.Release)
	cgroup.Prune(agentCgroupPrefix, holderGone)
	if g, err := cgroup.Create(fmt.Sprintf("%s%d", agentCgroupPrefix, holder.PID), d.cgroupLimits()); err != nil {
		d.cgroupNote = err.Error()
	} else {
		d.cgroup = g
		d.target.Limits.Cgroup = g.JoinFiles()
		cu.Add(d.removeCgroup)
	}
	d.limits = d.applyLimits()
	// serve takes the shutdown over from here.
	d.down = cu
	cu.Release()
	return d, nil
}

func (d *Daemon) serve(ctx context.Context) (err error) {
	ctx, stop := context.WithCancel(ctx)
	d.stop = stop
	d.serveCtx = ctx
	// One shutdown for every way serve ends, a start-up that fails half-way
	// included (it must fail closed, not hang with a live sandbox). end
	// comes first: the context ends and the sandbox dies, which is what
	// every step below waits for. Then the steps run newest first, each
	// registered as soon as what it undoes exists: they wait for a part to
	// finish or undo it, and none waits for something only a later step
	// would end. start's steps (the cgroup, the held namespaces, the holder,
	// the lock) come last.
	down := &d.down
	defer func() {
		d.end()
		down.Clean()
		if err == nil {
			d.log.Info("stopped")
		}
	}()
	down.Add(reaper.Start(d.log))
	down.Add(d.leftovers.Close)
	if d.recs, err = records.Open(d.harnessPath("records")); err != nil {
		return err
	}

	if err := d.net.Start(ctx, egress.StartConfig{
		Listen:        d.target.Listen,
		AuditDir:      d.harnessPath("audit"),
		Resolver:      d.cfg.Resolver,
		ResolveWait:   peerResolveWait,
		Upstream:      d.cfg.Upstream,
		Catch:         d.catchRules,
		AddAnswered:   d.addAnswered,
		ListenPacket:  d.target.ListenPacket,
		Netlink:       d.target.Netlink,
		AllowDegraded: d.cfg.AllowDegraded,
		Log:           d.log,
	}); err != nil {
		return err
	}
	down.Add(d.net.Close)
	d.noteRuntimeHosts()
	d.reserveGradeSpace()
	// The first program of the image's that the sandbox runs besides pid 1
	// is the entrypoint; sessions come later.
	use := harness.RootfsUse{Since: time.Now(), PID: os.Getpid(), Sandboxd: Version, HostMode: d.cfg.HostMode}
	if d.cfg.Task != nil {
		use.Task = d.cfg.Task.Name
	}
	if err := harness.MarkRootfs(d.cfg.HarnessDir, use); err != nil {
		return err
	}
	// Before the agent can take the pids they would come from.
	d.spareMade()
	// A key that cannot be used fails the start before any agent code runs.
	if d.sshKeys != nil {
		if _, err := d.sshKeys(); err != nil {
			return err
		}
	}
	entrypointDone, err := d.startEntrypoint(ctx)
	if err != nil {
		return err
	}
	down.Add(entrypointDone)
	if d.cfg.Task != nil && d.cfg.Task.Environment.Healthcheck != nil {
		// Starting from the first status on, not from whenever the
		// checks' goroutine first runs.
		d.setHealth(HealthStarting, "")
		healthDone := make(chan struct{})
		go func() { defer close(healthDone); d.watchHealth(ctx) }()
		down.Add(func() { <-healthDone })
	}
	door, err := d.startSSH(ctx)
	if err != nil {
		return err
	}
	d.ssh = door
	if door != nil {
		sshDone := make(chan struct{})
		go func() {
			defer close(sshDone)
			// Not ctx: the Shutdown below ends it, after the grace.
			if err := door.server.Serve(context.Background(), door.listener); err != nil && ctx.Err() == nil {
				d.log.Error("ssh stopped", "err", err)
			}
		}()
		down.Add(func() {
			// Sessions whose processes died with the sandbox still get to
			// tell their clients why; the rest are cut after a short grace.
			grace, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			door.server.Shutdown(grace)
			cancel()
			<-sshDone
		})
	}

	// The control socket exists only while the sandbox is ready.
	sock := control.Socket(d.cfg.HarnessDir)
	ln, err := harness.ListenControl(sock)
	if err != nil {
		return err
	}
	down.Add(func() {
		ln.Close()
		os.Remove(sock)
	})
	go func() { <-ctx.Done(); ln.Close() }()
	var handlers sync.WaitGroup
	down.Add(handlers.Wait)

	// Two may report: the holder's end and the pin's copy.
	died := make(chan error, 2)
	go func() {
		select {
		case <-d.holder.Done():
			if ctx.Err() != nil {
				return // end killed it
			}
			died <- fmt.Errorf("the sandbox's holder (pid %d) died: every agent process is gone; serve stops rather than build a new sandbox silently", d.holder.PID)
			d.log.Error("sandbox lost", "pid", d.holder.PID, "bwrap_stderr", d.holder.Stderr())
			stop()
		case <-ctx.Done():
		}
	}()

	// The copy is made beside the first sessions: the kernel has kept the
	// file as it was started (join.Pin), and a joined process that starts
	// meanwhile waits for the copy.
	go func() {
		if err := join.Seal(); err != nil && ctx.Err() == nil {
			died <- err
			d.log.Error("own executable not pinned", "err", err)
			stop()
		}
	}()
	if d.cfg.OnReady != nil {
		d.cfg.OnReady()
	}
	d.log.Info("serving", "control", sock, "sandbox_pid", d.holder.PID, "workdir", d.cfg.Workdir, "agent_uid", d.agent.UID)
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			d.handle(ctx, c)
		}()
	}
	select {
	case err := <-died:
		return err
	default:
		return nil
	}
}

// end begins serve's end: the context ends, which stops the listeners,
// sessions, health checks and proxies, and the sandbox is killed with
// every process in it. It returns once the holder is gone.
func (d *Daemon) end() {
	d.stop()
	d.killHolder()
}

// killHolder kills the sandbox and waits for its holder, once: the holder's
// pid is not to be signalled again after it has been reaped.
func (d *Daemon) killHolder() {
	d.holderOnce.Do(d.holder.Kill)
}

// harnessPath is a path inside the harness dir.
func (d *Daemon) harnessPath(elem ...string) string {
	return filepath.Join(append([]string{d.cfg.HarnessDir}, elem...)...)
}

// Status reports the daemon's state.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	sessions := make([]session, 0, len(d.sessions))
	for _, s := range d.sessions {
		sessions = append(sessions, *s)
	}
	phase, entrypoint, health, healthOut := d.phase, d.entrypoint, d.healthState, d.healthOutput
	d.mu.Unlock()
	if phase == "" {
		phase = "agent"
	}
	var taskName string
	if d.cfg.Task != nil {
		taskName = d.cfg.Task.Name
	}
	ns := netStatus{Agent: string(d.cfg.Network.Agent.Mode), Verifier: string(d.cfg.Network.Verifier.Mode), Peers: d.net.Peers()}
	if d.cfg.RuntimeHosts.Any() {
		ns.RuntimeHosts = &d.cfg.RuntimeHosts
	}
	ns.UpstreamProxy = d.cfg.Upstream.Describe()
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].ID < sessions[j].ID })
	deg := append(append([]string{}, d.holder.Degradations...), d.warnings...)
	if why := d.net.Degraded(); why != "" {
		deg = append(deg, why)
	}
	var sshSt *sshStatus
	if d.ssh != nil {
		sshSt = &sshStatus{Listen: d.ssh.listen, HostKey: d.ssh.hostKeyFP, Sessions: d.ssh.server.Sessions()}
	}
	return Status{
		SSH:          sshSt,
		Version:      Version,
		Phase:        phase,
		Task:         taskName,
		Entrypoint:   entrypoint,
		Health:       health,
		HealthOutput: healthOut,
		Network:      ns,
		HarnessDir:   d.cfg.HarnessDir,
		Workdir:      d.cfg.Workdir,
		AgentUser:    userStatus{Name: d.agent.Name, UID: d.agent.UID, GID: d.agent.GID},
		Sandbox: sandboxSt{
			PID: d.holder.PID, Bwrap: d.holder.Version.String(), BwrapPath: d.holder.Bwrap,
			IDMap: d.holder.MapMode, Namespaces: d.holder.Namespaces,
			UIDMap: d.holder.UIDMap.Line(), GIDMap: d.holder.GIDMap.Line(),
		},
		Degradations: deg,
		Sessions:     sessions,
		Limits:       d.statusLimits(),
		Usage:        d.usage(),
		Uptime:       time.Since(d.started).Seconds(),
		Settings:     d.cfg.Settings,
	}
}
