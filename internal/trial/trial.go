// Package trial is `sandboxd trial`: one rollout of one task on this
// machine, without a container. It serves the task with a daemon of its
// own and plays the harness against it as any client does: the agent runs
// over the daemon's SSH door, and the grade is asked on its control
// socket.
package trial

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/internal/sessionenv"
	"github.com/sandboxd/sandboxd/pkg/collect"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/layer"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// Config is one trial: serve the task, run the agent, grade, stop.
type Config struct {
	TaskDir    string
	Agent      string // "oracle", "nop", or a command run in the sandbox
	HarnessDir string // "" is a fresh one under /media, removed afterwards
	// ArtifactsDir is where the task's artifacts and collect hooks' output
	// are kept (a new or empty directory); "" is a fresh one under the
	// system's temporary directory, made only when the task declares any.
	ArtifactsDir string
	Bwrap        string
	AllowCIDRs   []string
	// AgentHosts and EnvHosts are the run-time host allowances,
	// --allow-agent-host and --allow-environment-host (config.AllowRuntimeHosts).
	AgentHosts, EnvHosts []string
	Resolver             egress.Resolver // nil is the system's; tests map names to loopback
	Log                  *slog.Logger
	Stderr               io.Writer // the agent's output, for the person watching
}

// Result is what a trial prints: the verdict, and which of Harbor's agent
// tools the agent had. A trial installs nothing (it runs on the machine's
// own root filesystem), unlike Harbor, whose installed agents add what is
// missing before their phase, and unlike an adapted image: the tools say
// what an oracle or nop baseline ran with, to compare it with Harbor's own.
type Result struct {
	grade.Verdict
	// HarborTools is layer.HarborToolsHere on the agent's PATH, each tool
	// present or missing; nil when the probe could not run (the log says why).
	HarborTools []layer.ToolEntry `json:"harbor_tools,omitempty"`
}

// Print writes r as trial prints it: one JSON document on stdout, the
// verdict's line for people on stderr. It returns the verdict's exit code.
func (r Result) Print(stdout, stderr io.Writer) int {
	b, _ := json.MarshalIndent(r, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	return r.Verdict.Print(io.Discard, stderr)
}

// Run runs the trial and returns its result. An error means sandboxd
// itself failed; the agent's own failure is in the verdict.
func Run(ctx context.Context, tr Config) (Result, error) {
	var r Result
	v, err := run(ctx, tr, &r.HarborTools)
	r.Verdict = v
	return r, err
}

func run(ctx context.Context, tr Config, tools *[]layer.ToolEntry) (v grade.Verdict, err error) {
	log := tr.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if tr.Stderr == nil {
		tr.Stderr = io.Discard
	}
	harness := tr.HarnessDir
	if harness == "" {
		if err := os.MkdirAll("/media", 0o755); err != nil {
			return grade.Verdict{}, err
		}
		dir, err := os.MkdirTemp("/media", "sandboxd-trial-")
		if err != nil {
			return grade.Verdict{}, fmt.Errorf("make the trial's harness dir: %w", err)
		}
		harness = dir
		defer os.RemoveAll(dir)
	}
	// The collection leaves the harness dir once the daemon has stopped
	// (this runs after the stop below, before the removal above).
	defer func() { keepCollected(&v, tr.ArtifactsDir, tr.TaskDir, log) }()
	// Marked before anything else, so that a concurrent trial's sandbox
	// hides it too.
	if err := os.WriteFile(filepath.Join(harness, masks.HarnessMarker), nil, 0o600); err != nil {
		return grade.Verdict{}, err
	}
	taskDir, err := filepath.Abs(tr.TaskDir)
	if err != nil {
		return grade.Verdict{}, err
	}
	cfg, err := serveConfig(tr, harness, taskDir, log)
	if err != nil {
		return grade.Verdict{}, err
	}
	cfg.SSH.Listen = "127.0.0.1:0" // a task's own listen address is for containers
	*tools = harborToolsHere(ctx, cfg, log)
	// An image has its WORKDIR; on a bare machine the trial makes it, and
	// removes it afterwards so that the next trial starts from nothing.
	if _, err := os.Stat(cfg.Workdir); os.IsNotExist(err) {
		if err := os.MkdirAll(cfg.Workdir, 0o755); err != nil {
			return grade.Verdict{}, fmt.Errorf("make the task's workdir %s: %w", cfg.Workdir, err)
		}
		defer os.RemoveAll(cfg.Workdir)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	go func() { served <- daemon.Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-served:
		return grade.Verdict{}, fmt.Errorf("serve ended before it was ready: %w", err)
	}
	defer func() {
		cancel()
		<-served
	}()

	client := control.Client{HarnessDir: cfg.HarnessDir}
	if v, ok, err := awaitHealthy(ctx, client, cfg.Task.Environment.Healthcheck); err != nil || !ok {
		return v, err
	}
	agent, remote, err := runAgent(ctx, client, cfg.Task, tr.Agent, tr.Stderr, log)
	if err != nil {
		return grade.Verdict{}, err
	}
	// records shows the outcome on the agent's own session, which only we
	// can name: by its client address.
	if err := client.Call(ctx, control.Request{Op: "agent-done", Agent: &agent, Remote: remote}, &daemon.AgentMarked{}); err != nil {
		log.Warn("the agent's outcome is not in the records", "err", err)
	}
	// As Harbor does, the run is graded whatever the agent's outcome.
	err = client.Call(ctx, control.Request{Op: "grade"}, &v)
	v.Agent = &agent
	return v, err
}

// keepCollected moves what the grading collected out of the trial's
// harness dir, to dir or a fresh one, and says where in the verdict.
func keepCollected(v *grade.Verdict, dir, taskDir string, log *slog.Logger) {
	if v.Collected == nil || v.Collected.Dir == "" {
		return
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "sandboxd-artifacts-"+filepath.Base(filepath.Clean(taskDir))+"-")
		if err != nil {
			v.Collected.Message = "the artifacts could not be kept: " + err.Error()
			return
		}
		dir = d
	}
	if err := collect.Move(v.Collected.Dir, dir); err != nil {
		log.Warn("keep the artifacts", "err", err)
		v.Collected.Message = "the artifacts could not be kept: " + err.Error()
		return
	}
	v.Collected.Dir = dir
}

// harborToolsHere probes for Harbor's agent tools on the PATH an agent
// session gets (the image's ENV, then the agent phase's variables, as the
// daemon makes it). Host mode shares the machine's root, so what the probe
// finds is what the agent finds.
func harborToolsHere(ctx context.Context, cfg config.Config, log *slog.Logger) []layer.ToolEntry {
	tools, err := layer.HarborToolsHere(ctx, sessionenv.Make(cfg.ImageEnv, cfg.AgentEnv, idmap.User{}, nil))
	if err != nil {
		log.Warn("the result does not say which of Harbor's agent tools the agent had", "err", err)
	}
	return tools
}

// awaitHealthy holds the agent back until the task's healthcheck has
// passed, as Harbor does before its agent phase; ok is false, with the
// verdict that says so, when it became unhealthy first. A task without a
// healthcheck passes at once. A check that neither passes nor fails within
// the longest its own settings allow (one the daemon cannot run at all) is
// sandboxd's failure, not the task's.
func awaitHealthy(ctx context.Context, client control.Client, hc *task.Healthcheck) (v grade.Verdict, ok bool, err error) {
	if hc == nil {
		return grade.Verdict{}, true, nil
	}
	bound := hc.StartPeriod + hc.StartInterval + time.Duration(hc.Retries+1)*(hc.Interval+hc.Timeout) + healthGrace
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		var st daemon.Status
		if err := client.Call(ctx, control.Request{Op: "status"}, &st); err != nil {
			return grade.Verdict{}, false, err
		}
		switch st.Health { // "" until the daemon's first check has begun
		case daemon.HealthHealthy:
			return grade.Verdict{}, true, nil
		case daemon.HealthUnhealthy:
			msg := "the task's healthcheck never passed, so the agent did not run and nothing was graded"
			if st.HealthOutput != "" {
				msg += "; its last output: " + st.HealthOutput
			}
			return grade.Verdict{Status: grade.StatusUnhealthy, ExitCode: -1, Message: msg}, false, nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() == nil {
				return grade.Verdict{}, false, fmt.Errorf("the task's healthcheck neither passed nor failed in %s, the longest its settings allow: the daemon could not run it (its log says why)", bound)
			}
			return grade.Verdict{}, false, ctx.Err()
		case <-time.After(healthPoll):
		}
	}
}

// healthPoll is how often trial asks whether the healthcheck has passed:
// far below any interval_sec a task writes.
const healthPoll = 100 * time.Millisecond

// healthGrace is added to the longest a healthcheck can take by its own
// settings, for the daemon's start and the visitors' own.
const healthGrace = 30 * time.Second

// runAgent plays the agent under agent.timeout_sec: the oracle feeds
// solution/solve.sh to `bash -s` through a real SSH session, as the agent
// user in the workdir; nop does nothing; anything else is a command. The
// agent's own failure is its outcome; an error means sandboxd failed.
// remote is the client address of the agent's SSH session ("" for nop).
func runAgent(ctx context.Context, client control.Client, t *task.Task, agent string, out io.Writer, log *slog.Logger) (_ grade.Agent, remote string, err error) {
	var command string
	var stdin io.Reader
	switch agent {
	case "", "nop":
		return grade.Agent{Status: grade.AgentCompleted}, "", nil
	case "oracle":
		if t.SolutionScript == "" {
			return grade.Agent{}, "", fmt.Errorf("task %s has no solution/solve.sh for the oracle", t.Name)
		}
		script, err := os.ReadFile(t.SolutionScript)
		if err != nil {
			return grade.Agent{}, "", fmt.Errorf("read the oracle: %w", err)
		}
		command = "bash -s"
		if env := t.SolutionEnv().Environ(); len(env) > 0 {
			command = "env " + shellQuote(env) + " bash -s"
		}
		stdin = bytes.NewReader(script)
	default:
		command = agent
	}
	timeout := t.Agent.Timeout
	if timeout <= 0 {
		timeout = 24 * time.Hour
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	code, err := sshRun(ctx, actx, client, command, stdin, out, &remote)
	res := grade.Agent{ExitCode: code, DurationSec: time.Since(start).Seconds()}
	switch {
	case ctx.Err() != nil:
		return grade.Agent{}, "", ctx.Err()
	case actx.Err() == context.DeadlineExceeded:
		// Harbor grades after an agent timeout, with the agent's
		// background processes alive; the outcome says it was cut short.
		res.Status, res.ExitCode = grade.AgentTimeout, -1
		res.Message = fmt.Sprintf("the agent ran past agent.timeout_sec (%s); the run was graded with the agent still running, as under Harbor", timeout)
		log.Warn("agent timed out; grading anyway", "timeout", timeout)
	case err != nil:
		res.Status, res.ExitCode = grade.AgentError, -1
		res.Message = "the agent's session failed: " + err.Error()
		log.Warn("agent session failed; grading anyway", "err", err)
	case code != 0:
		res.Status = grade.AgentError
		res.Message = fmt.Sprintf("the agent exited with status %d", code)
	default:
		res.Status = grade.AgentCompleted
	}
	log.Info("agent finished", "agent", agent, "status", res.Status, "exit", res.ExitCode, "duration_sec", res.DurationSec)
	return res, remote, nil
}

// sshRun runs command over one SSH session to the daemon's door, as a
// harness would, with the agent key the daemon generated (`sandboxd keys`)
// at the address its status names, and waits for it until wait ends.
// *local is set to the session's client address, as the daemon records it.
//
// When wait ends first (the agent's timeout), the session is left running
// until life ends, as Harbor leaves an agent's processes running at its
// timeout: grading follows with the agent still at work, and the daemon's
// stop ends it. Ending the session here would end the agent's command with it.
func sshRun(life, wait context.Context, client control.Client, command string, stdin io.Reader, out io.Writer, local *string) (int, error) {
	var st daemon.Status
	if err := client.Call(wait, control.Request{Op: "status"}, &st); err != nil {
		return 0, err
	}
	if st.SSH == nil {
		return 0, errors.New("the trial's serve has no SSH door")
	}
	var keys daemon.Keys
	if err := client.Call(wait, control.Request{Op: "keys"}, &keys); err != nil {
		return 0, fmt.Errorf("the trial's SSH door has no agent key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey([]byte(keys.PrivateKey))
	if err != nil {
		return 0, err
	}
	var dialer net.Dialer
	nc, err := dialer.DialContext(wait, "tcp", st.SSH.Listen)
	if err != nil {
		return 0, err
	}
	detached := false
	defer func() {
		if !detached {
			nc.Close()
		}
	}()
	*local = nc.LocalAddr().String()
	go func() { <-life.Done(); nc.Close() }()
	cc, chans, reqs, err := ssh.NewClientConn(nc, st.SSH.Listen, &ssh.ClientConfig{
		User: "agent",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		// The door's own key, as its status names it.
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if fp := ssh.FingerprintSHA256(key); fp != st.SSH.HostKey {
				return fmt.Errorf("the SSH door's host key is %s, not %s as its status says", fp, st.SSH.HostKey)
			}
			return nil
		},
	})
	if err != nil {
		return 0, err
	}
	sshClient := ssh.NewClient(cc, chans, reqs)
	sess, err := sshClient.NewSession()
	if err != nil {
		return 0, err
	}
	sess.Stdout, sess.Stderr, sess.Stdin = out, out, stdin
	if err := sess.Start(command); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err = <-done:
	case <-wait.Done():
		detached = true
		return -1, wait.Err()
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

func shellQuote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// serveConfig is the serve configuration of the trial's task, in host mode.
func serveConfig(tr Config, harness, taskDir string, log *slog.Logger) (config.Config, error) {
	cfg := config.Config{
		HarnessDir: harness,
		Bwrap:      tr.Bwrap,
		HostMode:   true,
		Log:        log,
		SSH:        config.SSH{Listen: "127.0.0.1:0"},
		Resolver:   tr.Resolver,
	}
	if len(tr.AllowCIDRs) > 0 {
		// Given, the ranges replace sandboxd.toml's, as serve's flag does.
		cfg.Settings = config.Settings{"egress-allow-cidr": {Value: tr.AllowCIDRs, Source: config.SourceFlag, As: "--egress-allow-cidr"}}
	}
	cfg, err := config.Configure(cfg, taskDir, tr.AllowCIDRs, os.LookupEnv)
	if err != nil {
		return cfg, err
	}
	if cfg.Task == nil {
		return cfg, fmt.Errorf("%s holds no task.toml", tr.TaskDir)
	}
	return config.AllowRuntimeHosts(cfg, tr.AgentHosts, tr.EnvHosts)
}
