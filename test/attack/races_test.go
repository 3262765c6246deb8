package attack

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/masks"
	"github.com/sandboxd/sandboxd/pkg/egress"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/tarcopy"
)

// The race class: time-of-check races against every path in the shared
// filesystem that the daemon or the visitor opens, reads, stats, mounts,
// writes or executes once the agent can run. A root agent owns that
// filesystem: it can watch it with inotify, swap names with renameat2's
// RENAME_EXCHANGE, turn a file into a symlink, a FIFO, /dev/urandom, a huge
// file or a directory, and rename the directories above. Each attempt plants
// its attack as the agent (starting a racer in the background where the
// attack is a race), makes the daemon do what it does with that path —
// grade, allocate a pty, start an SSH session or sftp, forward a port, run
// `exec -u`, splice a peer — and holds when all of these are true:
//
//   - what the daemon did ended within its bound, with the genuine result
//     (the verifier's own verdict, a real pty, a session);
//   - nothing of the harness reached the agent's view (the tests' secret,
//     the harness dir, the verdict files);
//   - the sandbox's mounts are as they were;
//   - the daemon took no controlling terminal of the agent's;
//   - a new `sandboxd status` and a new SSH session still answer.
//
// The class runs in host mode (TestEscape_RacesHost, as under `sandboxd
// trial`: only /tests, /logs, /run/user, the sandbox's own /dev and paths
// the test made are touched, since / is this machine's) and in a container
// (TestEscape_RacesContainer, where the image's /etc, /usr, /tmp, /srv and /
// itself are fair game), each as root and as uid 1000.

// raceAgents are the agents of the race class: the sandbox's root, and an
// unprivileged uid 1000 without sudo.
var raceAgents = []struct{ name, user string }{
	{"root", "0"},
	{"user", "1000:1000"},
}

// raceVerifier is the tests' script: reward 0, and the tests' secret both in
// its output (a genuine grading prints it) and in a verdict file (which must
// never land where the agent reads).
const raceVerifier = `echo "verifier uid=$(id -u) cwd=$PWD"
cat /tests/secret.txt > /logs/verifier/details.txt
echo 0 > /logs/verifier/reward.txt
sleep 0.2
echo "reward now: $(cat /logs/verifier/reward.txt)"
echo "tests: $(cat /tests/secret.txt)"
`

// Bounds: every loop of the class ends by count or by time.
const (
	raceAnswer   = 10 * time.Second // a session, pty, sftp, forward or exec -u must answer within this
	raceGrade    = 30 * time.Second // a grading must end within this
	raceStall    = 5 * time.Second  // a grading the daemon itself could block must answer within this
	raceStatus   = 5 * time.Second
	raceSSH      = 15 * time.Second
	raceStop     = 10 * time.Second
	racerSeconds = 30 // a racer's life at most
)

// race is one attack on one path.
type race struct {
	name  string
	where string // "host", "container", or "" for both
	// plant is the agent's script (with raceTarget.expand's placeholders and
	// racePrelude's functions). It exits 0 when the attack is in place and
	// non-zero when it was refused, which holds by itself — the non-root
	// agent's usual fate.
	plant string
	// rootPlants says a root agent's plant must succeed: a refusal there
	// means the attempt is broken, not that it held.
	rootPlants bool
	// act makes the daemon use the path; nil grades (gradings times). It
	// returns "" when the daemon did its part genuinely, else what went wrong.
	act      func(rt *raceTarget) string
	gradings int
	// honest accepts a verdict that is not a reward, when the agent broke
	// its own grade (a verifier that cannot start in a FIFO workdir), as
	// long as it is not sandboxd's own failure and not a forged reward.
	honest bool
	// racer checks what the racer reported (after it stopped).
	racer func(out string) string
	// undo is the agent's script that puts back what plant changed in the
	// agent's own view; restore is the substrate's side, for the shared
	// filesystem. Both run whatever happened.
	undo    string
	restore func(rt *raceTarget)
	// keep are files of the shared filesystem saved before the plant and
	// put back after it.
	keep []string
}

// raceTarget is a served sandbox the race attempts run against: in this
// process on the host, or in a container's pid 1.
type raceTarget struct {
	where    string // "host" or "container"
	root     bool
	harness  string
	top      string // the topmost directory above the harness that a root agent would rename
	workdir  string
	bin      string // this test binary as the agent can run it
	holder   int
	secret   string
	client   control.Client
	sshAddr  string
	agentKey []byte
	// sh runs a script as the agent, in its workdir.
	sh func(script string) result
	// leaks names the secrets of the rollout found in s.
	leaks func(s string) []string
	// record counts the attempt; broken reports one that could not be made.
	record func(name string, held bool, detail string)
	broken func(name, detail string)
	// ctty says whether the daemon now has a controlling terminal it did
	// not have at start (and lets go of it).
	ctty func() string
	// peers reports the container's banner services' hits (legit, forbidden).
	peers func() (int64, int64)
	// stopped waits at most d for serve to return.
	stopped func(d time.Duration) bool
	// tally per agent, for the log.
	tried, held int
}

// expand fills an attack script's placeholders.
func (rt *raceTarget) expand(s string) string {
	return strings.NewReplacer(
		"{WD}", rt.workdir,
		"{H}", rt.harness,
		"{HP}", filepath.Dir(rt.harness),
		"{TOP}", rt.top,
		"{BIN}", rt.bin,
		"{CHILD}", childproc.Env+"="+roleRacer,
		"{SECS}", strconv.Itoa(racerSeconds),
	).Replace(s)
}

// racePrelude defines the functions every attack script may use: racer
// starts this binary's racer role in the background, as a process of the
// agent's that outlives the session, and waits until it is ready; slave
// names the pty the racer holds the master of; rn renames with rename(2)
// alone (mv copies and deletes where rename fails, which on an overlay
// root would gut the image's directories instead of moving them); decoy
// NAME makes the agent's own tests, whose test.sh writes reward 1, and
// prints where.
const racePrelude = `racer() { rm -f {WD}/racer.stop {WD}/racer.out; setsid env {CHILD} {BIN} {WD}/racer.stop {SECS} "$@" > {WD}/racer.out 2>&1 < /dev/null & i=0; until grep -q '^ready' {WD}/racer.out 2>/dev/null; do i=$((i+1)); [ $i -gt 250 ] && { cat {WD}/racer.out; return 1; }; sleep 0.02; done; }
slave() { sed -n 's/^slave //p' {WD}/racer.out; }
rn() { env {CHILD} {BIN} {WD}/racer.stop {SECS} rename "$1" "$2"; }
decoy() { d={WD}/decoy-$1; mkdir -p $d && printf '#!/bin/sh\necho 1 > /logs/verifier/reward.txt\necho "tests: forged"\n' > $d/test.sh && chmod 755 $d/test.sh && echo $d; }
`

// leakScan is what the agent looks at after each attempt: the harness dir's
// parent, /logs and /tests and whatever the attacks moved them to, and the
// files in them (the verifier's details.txt holds the tests' secret).
const leakScan = `ls -A {HP} /logs /logs/verifier 2>&1 | grep -v '^junk-'
for d in /tests /tests.* /logs.* {WD}/fake-logs {WD}/fake-logs/verifier; do [ -d "$d" ] && ls -A "$d"; done 2>/dev/null
find /logs /logs.* /tests /tests.* {WD}/fake-logs -maxdepth 2 -type f -size -64k 2>/dev/null | head -100 | while read -r f; do cat "$f"; done 2>/dev/null | head -c 262144
true`

// run makes every attempt of races that applies where rt is.
func (rt *raceTarget) run(races []race) {
	for _, r := range races {
		if r.where != "" && r.where != rt.where {
			continue
		}
		rt.attempt(r)
	}
	rt.stopsAfterAll()
}

func (rt *raceTarget) attempt(r race) {
	before, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", rt.holder))
	saved := saveFiles(r.keep)
	// The agent's view, then the shared filesystem (the image's files are
	// put back on their own, before anything else runs as the agent).
	restore := func() {
		if r.undo != "" {
			rt.sh(rt.expand(racePrelude + r.undo))
		}
		if r.restore != nil {
			r.restore(rt)
		}
	}
	start := time.Now()
	plant := rt.sh(rt.expand(racePrelude + r.plant))
	if plant.err != nil || plant.code >= 125 || plant.code != 0 && rt.root && r.rootPlants {
		rt.stopRacer()
		saved.putBack()
		restore()
		rt.broken(r.name, fmt.Sprintf("the plant (exit %d, %v): %s", plant.code, plant.err, clip(plant.output(), 1500)))
		return
	}
	if plant.code != 0 {
		rt.stopRacer()
		saved.putBack()
		restore()
		rt.count(r.name, true, "refused: "+clip(strings.TrimSpace(plant.output()), 500))
		return
	}
	var why []string
	add := func(s string) {
		if s != "" {
			why = append(why, s)
		}
	}
	detail := ""
	if r.act != nil {
		add(r.act(rt))
	} else {
		n := max(r.gradings, 1)
		for i := 0; i < n; i++ {
			msg, verdict := rt.gradeHeld(r.honest)
			detail += fmt.Sprintf("grading %d: %s\n", i+1, verdict)
			if msg != "" {
				add(fmt.Sprintf("grading %d of %d: %s", i+1, n, msg))
			}
		}
	}
	add(rt.ctty())
	racerOut := rt.stopRacer()
	if r.racer != nil {
		add(r.racer(racerOut))
	}
	// The image's files first: the agent's own shells read /etc/passwd.
	saved.putBack()
	scan := rt.sh(rt.expand(leakScan))
	if leaked := rt.leaks(scan.output()); len(leaked) > 0 {
		add(fmt.Sprintf("the agent's view holds %s afterwards", strings.Join(leaked, ", ")))
	}
	restore()
	if after, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", rt.holder)); string(after) != string(before) {
		add("the sandbox's mounts changed:\n" + mountDiff(string(before), string(after)))
	}
	add(rt.responsive())
	detail = fmt.Sprintf("plant: %s\n%sracer: %s\ntook %s", clip(strings.TrimSpace(plant.output()), 300), detail, strings.TrimSpace(racerOut), time.Since(start).Round(time.Millisecond))
	if len(why) > 0 {
		detail = strings.Join(why, "\n") + "\n" + detail
	}
	rt.count(r.name, len(why) == 0, detail)
}

func (rt *raceTarget) count(name string, held bool, detail string) {
	rt.tried++
	if held {
		rt.held++
	}
	rt.record(name, held, detail)
}

// gradeHeld grades once: "" when the verdict is the verifier's own (or,
// with honest, an error of the agent's making), else what is wrong, and the
// verdict as text either way.
func (rt *raceTarget) gradeHeld(honest bool) (string, string) {
	return rt.gradeWithin(raceGrade, 0, honest)
}

// gradeWithin grades, waiting at most d for the verdict; a verifier
// timeout other than 0 replaces the task's (`sandboxd grade --timeout`).
func (rt *raceTarget) gradeWithin(d, verifierTimeout time.Duration, honest bool) (string, string) {
	start := time.Now()
	req := control.Request{Op: "grade"}
	if verifierTimeout > 0 {
		req.GradeTimeout = verifierTimeout.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var v grade.Verdict
	err := rt.client.Call(ctx, req, &v)
	took := time.Since(start).Round(time.Millisecond)
	text := fmt.Sprintf("%s in %s: %s %v %q %s", v.Status, took, v.Message, v.Reward, clip(v.StdoutTail, 300), errString(err))
	switch {
	case err != nil:
		return fmt.Sprintf("no verdict (%v)", err), text
	case genuine(v, rt.secret):
		return "", text
	case honest && v.Status != grade.StatusGraded:
		return "", text
	}
	return "not the verifier's own verdict", text
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// stopRacer stops the attempt's racer, if any, and returns what it said.
func (rt *raceTarget) stopRacer() string {
	out := filepath.Join(rt.workdir, "racer.out")
	if _, err := os.Stat(out); err != nil {
		return ""
	}
	os.WriteFile(filepath.Join(rt.workdir, "racer.stop"), nil, 0o644)
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ = os.ReadFile(out); strings.Contains(string(b), "\ndone") || strings.HasPrefix(string(b), "done") {
			break
		}
	}
	os.Remove(out)
	return string(b)
}

// responsive is "" when a new `sandboxd status` and a new SSH session both
// answer within their bounds.
func (rt *raceTarget) responsive() string {
	var why []string
	ctx, cancel := context.WithTimeout(context.Background(), raceStatus)
	defer cancel()
	var st daemon.Status
	if err := rt.client.Call(ctx, control.Request{Op: "status"}, &st); err != nil {
		why = append(why, fmt.Sprintf("status does not answer within %s: %v", raceStatus, err))
	} else if st.Sandbox.PID != rt.holder {
		why = append(why, fmt.Sprintf("status was answered by something else (sandbox pid %d, not %d)", st.Sandbox.PID, rt.holder))
	}
	if w := sshSession(rt, raceSSH, "a new SSH session", func(s *ssh.Session) error {
		return sessionOutput(s, false, "echo alive", "alive")
	}); w != "" {
		why = append(why, w)
	}
	return strings.Join(why, "; ")
}

// stopsAfterAll records that `sandboxd stop` ends serve within its bound
// once every attempt was made.
func (rt *raceTarget) stopsAfterAll() {
	ctx, cancel := context.WithTimeout(context.Background(), raceStatus)
	defer cancel()
	err := rt.client.Call(ctx, control.Request{Op: "stop"}, nil)
	rt.count("sandboxd stop completes after every attempt", err == nil && rt.stopped(raceStop), fmt.Sprintf("stop: %v (bound %s)", err, raceStop))
}

// sshDo logs in with the agent key and runs fn, giving up after d.
func sshDo(addr string, key []byte, d time.Duration, fn func(c *ssh.Client) error) error {
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		return err
	}
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:            "agent",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a door on loopback that the test started
		Timeout:         d,
	})
	if err != nil {
		return fmt.Errorf("log in: %w", err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- fn(c) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("no answer within %s", d)
	}
}

// sshSession runs fn in a new SSH session of the agent's: "" when the
// daemon answered within d, else what did not.
func sshSession(rt *raceTarget, d time.Duration, what string, fn func(s *ssh.Session) error) string {
	if err := sshDo(rt.sshAddr, rt.agentKey, d, func(c *ssh.Client) error {
		s, err := c.NewSession()
		if err != nil {
			return err
		}
		defer s.Close()
		return fn(s)
	}); err != nil {
		return what + ": " + err.Error()
	}
	return ""
}

// sessionOutput runs command in s (with a pty when tty) and wants its
// output to contain want.
func sessionOutput(s *ssh.Session, tty bool, command, want string) error {
	if tty {
		if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
			return fmt.Errorf("pty-req: %w", err)
		}
	}
	out, err := s.CombinedOutput(command)
	if !strings.Contains(string(out), want) {
		return fmt.Errorf("%q printed %q (%v), not %q", command, clip(string(out), 300), err, want)
	}
	return nil
}

// The daemon's parts, each bounded.

// ptyAct allocates a pty both ways a harness does: `sandboxd exec -t` and
// SSH with pty-req. Each must be a pty of the sandbox's devpts.
func ptyAct(rt *raceTarget) string {
	x := execResult(rt.client, control.Request{Argv: []string{"/bin/sh", "-c", "tty"}, TTY: true}, raceAnswer)
	if x.err != nil || !strings.Contains(x.output(), "/dev/pts/") {
		// The SSH pty would only wait for the same hang again.
		return fmt.Sprintf("exec -t: %q %v", clip(x.output(), 200), x.err)
	}
	return sshSession(rt, raceAnswer, "ssh with a pty", func(s *ssh.Session) error {
		return sessionOutput(s, true, "tty", "/dev/pts/")
	})
}

// sshExecAct starts an SSH exec session, which checks the agent's login
// shell in the sandbox first. It must answer: run, or fail to run a shell
// the agent broke (exit 126), as sshd would.
func sshExecAct(rt *raceTarget) string {
	return sshSession(rt, raceAnswer, "ssh exec", func(s *ssh.Session) error {
		s.CombinedOutput("echo session")
		return nil
	})
}

// sftpAct asks for the sftp subsystem, which is sandboxd's own and never
// looks at the image's sftp-server: it must end (or run) within the bound
// whatever is planted there.
func sftpAct(rt *raceTarget) string {
	return sshSession(rt, raceAnswer, "sftp", func(s *ssh.Session) error {
		in, err := s.StdinPipe()
		if err != nil {
			return err
		}
		out, err := s.StdoutPipe()
		if err != nil {
			return err
		}
		if err := s.RequestSubsystem("sftp"); err != nil {
			return nil // refused outright: answered
		}
		in.Close()
		// Until the session ends (ssh.Session.Wait is for Start's
		// commands, not for subsystems).
		io.Copy(io.Discard, out)
		return nil
	})
}

// cpActCopies is how many copies cpAct makes, each one cp role for the
// racer to catch.
const cpActCopies = 40

// cpAct copies a small archive into the agent's workdir, cpActCopies times.
func cpAct(rt *raceTarget) string {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "cp-race", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("x\n"))
	tw.Close()
	for i := range cpActCopies {
		ctx, cancel := context.WithTimeout(context.Background(), raceAnswer)
		err := tarcopy.Run(ctx, rt.client, tarcopy.Copy{Src: "-", Dst: "sandbox:" + rt.workdir, Stdin: bytes.NewReader(b.Bytes()), Stderr: io.Discard})
		cancel()
		if err != nil {
			return fmt.Sprintf("copy %d of %d: %v", i+1, cpActCopies, err)
		}
	}
	return ""
}

// roleNotTaken fails a take-role racer that read a role, and one that saw
// none (then nothing was tried).
func roleNotTaken(out string) string {
	i := strings.Index(out, "seen ")
	if i < 0 {
		return "the racer gave no tally: " + strings.TrimSpace(out)
	}
	var seen, read int
	fmt.Sscanf(out[i:], "seen %d read %d", &seen, &read)
	switch {
	case read > 0:
		return "a root agent read the copy's role: " + strings.TrimSpace(out)
	case seen == 0:
		return "the racer saw no copy's role, so nothing was tried: " + strings.TrimSpace(out)
	}
	return ""
}

// forwardAct opens `ssh -L` to the peer's name, which the daemon resolves in
// the sandbox's /etc/hosts: connected or refused, it must answer.
func forwardAct(rt *raceTarget) string {
	if err := sshDo(rt.sshAddr, rt.agentKey, raceAnswer, func(c *ssh.Client) error {
		if conn, err := c.Dial("tcp", "db:8080"); err == nil {
			conn.Close()
		}
		return nil
	}); err != nil {
		return "direct-tcpip to db:8080: " + err.Error()
	}
	return ""
}

// execUserAct runs `sandboxd exec -u root`, which resolves the name in the
// image's /etc/passwd and /etc/group at the request.
func execUserAct(rt *raceTarget) string {
	x := execResult(rt.client, control.Request{Argv: []string{"/bin/sh", "-c", "id -u"}, User: "root"}, raceAnswer)
	var f *control.Failure
	if x.err != nil && !errors.As(x.err, &f) {
		return fmt.Sprintf("exec -u root: %v", x.err)
	}
	return ""
}

// peerAct connects to the peer from inside: the daemon splices it to the
// target it was given at start, never to another service.
func peerAct(rt *raceTarget) string {
	_, before := rt.peers()
	x := rt.sh(`exec 3<>/dev/tcp/db/8080 && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && timeout 5 cat <&3`)
	if _, after := rt.peers(); after != before {
		return fmt.Sprintf("the peer was spliced to the forbidden service: %q", clip(x.output(), 300))
	}
	return ""
}

// controlAct is the harness talking to the daemon by its socket's path: the
// answers must be the daemon's own.
func controlAct(rt *raceTarget) string {
	ctx, cancel := context.WithTimeout(context.Background(), raceStatus)
	defer cancel()
	var st daemon.Status
	if err := rt.client.Call(ctx, control.Request{Op: "status"}, &st); err != nil {
		return fmt.Sprintf("status: %v", err)
	}
	if st.Sandbox.PID != rt.holder {
		return fmt.Sprintf("status was answered by the agent (sandbox pid %d, not %d)", st.Sandbox.PID, rt.holder)
	}
	if msg, v := rt.gradeHeld(false); msg != "" {
		return msg + ": " + v
	}
	return ""
}

// gradeAct grades, waiting at most d for the verdict, with the verifier's
// timeout replaced by verifierTimeout unless it is 0. A short d is for what
// the daemon does before the verifier's timeout runs (nothing would end it);
// a short verifierTimeout for what the visitor does before the verifier
// starts.
func gradeAct(d, verifierTimeout time.Duration) func(rt *raceTarget) string {
	return func(rt *raceTarget) string {
		if msg, v := rt.gradeWithin(d, verifierTimeout, false); msg != "" {
			return msg + ": " + v
		}
		return ""
	}
}

// racerHits fails an inotify racer that saw grading make the name it
// watches: grading made something in the shared filesystem.
func racerHits(out string) string {
	if strings.Contains(out, "hits 0 ") || !strings.Contains(out, "hits ") {
		return ""
	}
	return "grading made the watched name in the shared filesystem: " + strings.TrimSpace(out)
}

// The attacks. Placeholders: {WD} the agent's workdir, {H} the harness dir,
// {HP} its parent (the tmpfs that hides it), {TOP} the directory above it
// that a rename would take along.
var races = []race{
	// Serving: the files the daemon reads while sessions start.
	{name: "/etc/group (read for each pty): a FIFO", where: "container", rootPlants: true,
		plant: `rm -f /etc/group && mkfifo -m 644 /etc/group`, keep: []string{"/etc/group"}, act: ptyAct},
	{name: "/etc/group: a 4 GiB sparse file", where: "container", rootPlants: true,
		plant: `truncate -s 4G /etc/group`, keep: []string{"/etc/group"}, act: ptyAct},
	{name: "/etc/group: a directory", where: "container", rootPlants: true,
		plant: `rm -f /etc/group && mkdir /etc/group`, keep: []string{"/etc/group"}, act: ptyAct},
	{name: "/etc/group: a symlink to the agent's own pty (the daemon must not take it as its controlling terminal)", where: "container", rootPlants: true,
		plant: `racer pty && ln -sfn "$(slave)" /etc/group`, keep: []string{"/etc/group"}, act: ptyAct},
	{name: "/etc/group: a symlink to /proc/kmsg (a sandbox mount; a blocking read the daemon may be privileged for)", where: "container", rootPlants: true,
		plant: `ln -sfn /proc/kmsg /etc/group`, keep: []string{"/etc/group"}, act: ptyAct},
	{name: "the login shell (checked for each SSH session): a FIFO", where: "container", rootPlants: true,
		plant: `rm -f /usr/local/bin/agent-shell && mkfifo -m 755 /usr/local/bin/agent-shell`, keep: []string{"/usr/local/bin/agent-shell"}, act: sshExecAct},
	{name: "the login shell: a symlink to /dev/urandom", where: "container", rootPlants: true,
		plant: `ln -sfn /dev/urandom /usr/local/bin/agent-shell`, keep: []string{"/usr/local/bin/agent-shell"}, act: sshExecAct},
	{name: "the login shell: a 4 GiB sparse executable", where: "container", rootPlants: true,
		plant: `rm -f /usr/local/bin/agent-shell && truncate -s 4G /usr/local/bin/agent-shell && chmod 755 /usr/local/bin/agent-shell`, keep: []string{"/usr/local/bin/agent-shell"}, act: sshExecAct},
	{name: "the login shell: a directory", where: "container", rootPlants: true,
		plant: `rm -f /usr/local/bin/agent-shell && mkdir /usr/local/bin/agent-shell`, keep: []string{"/usr/local/bin/agent-shell"}, act: sshExecAct},
	{name: "the login shell: a symlink to the agent's own pty", where: "container", rootPlants: true,
		plant: `racer pty && ln -sfn "$(slave)" /usr/local/bin/agent-shell`, keep: []string{"/usr/local/bin/agent-shell"}, act: sshExecAct},
	{name: "sftp-server (looked for at each sftp request): a FIFO", where: "container", rootPlants: true,
		plant: `mkdir -p /usr/lib/openssh && mkfifo -m 755 /usr/lib/openssh/sftp-server`, keep: []string{"/usr/lib/openssh/sftp-server"}, act: sftpAct},
	{name: "sftp-server: a symlink to /dev/urandom", where: "container", rootPlants: true,
		plant: `mkdir -p /usr/lib/openssh && ln -sfn /dev/urandom /usr/lib/openssh/sftp-server`, keep: []string{"/usr/lib/openssh/sftp-server"}, act: sftpAct},
	{name: "sftp-server: a 4 GiB sparse executable", where: "container", rootPlants: true,
		plant: `mkdir -p /usr/lib/openssh && truncate -s 4G /usr/lib/openssh/sftp-server && chmod 755 /usr/lib/openssh/sftp-server`, keep: []string{"/usr/lib/openssh/sftp-server"}, act: sftpAct},
	{name: "sftp-server: a directory", where: "container", rootPlants: true,
		plant: `mkdir -p /usr/lib/openssh/sftp-server`, keep: []string{"/usr/lib/openssh/sftp-server"}, act: sftpAct},
	{name: "sftp-server: a symlink to the agent's own pty", where: "container", rootPlants: true,
		plant: `mkdir -p /usr/lib/openssh && racer pty && ln -sfn "$(slave)" /usr/lib/openssh/sftp-server`, keep: []string{"/usr/lib/openssh/sftp-server"}, act: sftpAct},
	{name: "/etc/passwd (read by `sandboxd exec -u NAME`): a FIFO", where: "container", rootPlants: true,
		plant: `rm -f /etc/passwd && mkfifo -m 644 /etc/passwd`, keep: []string{"/etc/passwd"}, act: execUserAct},
	{name: "/etc/passwd: a symlink to /dev/urandom", where: "container", rootPlants: true,
		plant: `ln -sfn /dev/urandom /etc/passwd`, keep: []string{"/etc/passwd"}, act: execUserAct},
	{name: "/etc/passwd: a symlink to the agent's own pty", where: "container", rootPlants: true,
		plant: `racer pty && ln -sfn "$(slave)" /etc/passwd`, keep: []string{"/etc/passwd"}, act: execUserAct},
	{name: "/etc/passwd: a 4 GiB sparse file", where: "container", rootPlants: true,
		plant: `truncate -s 4G /etc/passwd`, keep: []string{"/etc/passwd"}, act: execUserAct},
	{name: "/etc/passwd: a directory", where: "container", rootPlants: true,
		plant: `rm -f /etc/passwd && mkdir /etc/passwd`, keep: []string{"/etc/passwd"}, act: execUserAct},
	{name: "/etc/passwd: a symlink to the harness dir's SSH host key", where: "container", rootPlants: true,
		plant: `ln -sfn {H}/keys/host_ed25519 /etc/passwd`, keep: []string{"/etc/passwd"}, act: execUserAct},
	{name: "/etc/resolv.conf and /etc/nsswitch.conf rewritten (names from DNS only, at 127.0.0.3): the peer's target name", where: "container", rootPlants: true,
		plant: `printf 'nameserver 127.0.0.3\n' > /etc/resolv.conf && printf 'hosts: dns\n' > /etc/nsswitch.conf`, keep: []string{"/etc/resolv.conf", "/etc/nsswitch.conf"}, act: peerAct},
	{name: "the sandbox's /etc/hosts (read for `ssh -L NAME`): a 4 GiB sparse file", where: "container", rootPlants: true,
		plant: `cp /etc/hosts {WD}/hosts.saved && truncate -s 4G /etc/hosts`, undo: `cat {WD}/hosts.saved > /etc/hosts`, act: forwardAct},
	{name: "the sandbox's /etc/hosts: replaced by a FIFO", where: "container",
		plant: `rm -f /etc/hosts && mkfifo /etc/hosts`, act: forwardAct},
	{name: "/etc renamed, a FIFO for hosts in the new one: `ssh -L NAME`", where: "container",
		plant:   `cp -a /etc /etc.agent && rm -f /etc.agent/hosts && mkfifo -m 644 /etc.agent/hosts && rn /etc /etc.orig && rn /etc.agent /etc`,
		restore: func(rt *raceTarget) { unblockFIFO("/etc/hosts"); putBackDir("/etc", "/etc.orig", "/etc.agent") }, act: forwardAct},
	{name: "/etc renamed, the substrate's /etc/hosts now the agent's: the peer's target name pointed at another service", where: "container",
		plant:   `cp -a /etc /etc.agent && sed -i 's/^127.0.0.2 peerhost.test/127.0.0.3 peerhost.test/' /etc.agent/hosts && grep -q '^127.0.0.3 peerhost.test' /etc.agent/hosts && rn /etc /etc.orig && rn /etc.agent /etc`,
		restore: func(rt *raceTarget) { putBackDir("/etc", "/etc.orig", "/etc.agent") }, act: peerAct},
	{name: "/dev/pts renamed, /dev/ptmx a FIFO, /dev/pts/ptmx mode 0: a pty", rootPlants: true,
		plant: `rn /dev/pts /dev/pts.agent; stat -c %a /dev/pts/ptmx > {WD}/ptmx.mode && rm -f /dev/ptmx && mkfifo /dev/ptmx && chmod 0 /dev/pts/ptmx`,
		undo:  `chmod "$(cat {WD}/ptmx.mode)" /dev/pts/ptmx; rm -f /dev/ptmx; ln -s pts/ptmx /dev/ptmx`, act: ptyAct},

	// Grading: what the visitor builds its view from.
	{name: "the workdir (the verifier's cwd): its `tests` and `logs` symlinks to the agent's decoys", rootPlants: true,
		plant: `d=$(decoy wd) && mkdir -p {WD}/fake-logs/verifier && ln -sfn $d {WD}/tests && ln -sfn {WD}/fake-logs {WD}/logs`},
	{name: "/tests: a symlink to /proc/sys, planted before grading", rootPlants: true,
		plant: `ln -sfn /proc/sys /tests`, restore: removeTests},
	{name: "/tests: a symlink to the harness dir's parent (its mask)", rootPlants: true,
		plant: `ln -sfn {HP} /tests`, restore: removeTests},
	{name: "/tests: a symlink to the /logs/verifier mask", rootPlants: true,
		plant: `ln -sfn /logs/verifier /tests`, restore: removeTests},
	{name: "/tests: a symlink to the agent's decoy tests (reward 1)", rootPlants: true,
		plant: `d=$(decoy link) && ln -sfn $d /tests`, restore: removeTests},
	{name: "/tests: a FIFO", rootPlants: true, plant: `mkfifo /tests`, restore: removeTests},
	{name: "/tests: a symlink to /dev/urandom", rootPlants: true, plant: `ln -sfn /dev/urandom /tests`, restore: removeTests},
	{name: "/tests: a 4 GiB sparse file", rootPlants: true, plant: `truncate -s 4G /tests`, restore: removeTests},
	{name: "/tests: RENAME_EXCHANGE loop between the agent's /tests and a decoy, both with a test.sh writing reward 1", rootPlants: true, gradings: 2,
		plant:   `for d in /tests /tests.decoy; do mkdir -p $d && printf '#!/bin/sh\necho 1 > /logs/verifier/reward.txt\necho "tests: forged"\n' > $d/test.sh && chmod 755 $d/test.sh || exit 1; done; racer exchange /tests /tests.decoy`,
		restore: removeTests},
	{name: "/logs: RENAME_EXCHANGE loop with a decoy /logs whose verifier/ says reward 1", rootPlants: true, gradings: 2,
		plant:   `mkdir -p /logs.decoy/verifier && echo 1 > /logs.decoy/verifier/reward.txt && racer exchange /logs /logs.decoy`,
		restore: restoreLogs},
	{name: "/logs: renamed aside, a symlink to the harness dir's parent in its place", rootPlants: true,
		plant:   `rn /logs /logs.aside && ln -s {HP} /logs`,
		restore: restoreLogs},
	{name: "/logs: renamed aside, a symlink to the agent's own directory in its place", rootPlants: true,
		plant:   `mkdir -p {WD}/fake-logs/verifier && echo 1 > {WD}/fake-logs/verifier/reward.txt && rn /logs /logs.aside && ln -s {WD}/fake-logs /logs`,
		restore: restoreLogs},
	{name: "/logs: 2,000 entries more, FIFOs, sockets and symlinks to /dev/urandom among them", rootPlants: true,
		plant:   `test -w /logs && env {CHILD} {BIN} {WD}/racer.stop {SECS} fill /logs 2000`,
		restore: func(rt *raceTarget) { removeJunk("/logs") }},
	{name: "/logs/verifier (the sandbox's mask): renamed, or removed",
		plant: `rn /logs/verifier /logs/verifier.agent || rmdir /logs/verifier`, restore: restoreLogs},
	{name: "the workdir: renamed, a symlink to the harness dir's parent in its place", honest: true,
		plant: `cd / && rn {WD} {WD}.agent && ln -s {HP} {WD}`, restore: func(rt *raceTarget) { putBackDir(rt.workdir, rt.workdir+".agent") }},
	{name: "the workdir: renamed, a FIFO in its place", honest: true,
		plant: `cd / && rn {WD} {WD}.agent && mkfifo {WD}`, restore: func(rt *raceTarget) { unblockFIFO(rt.workdir); putBackDir(rt.workdir, rt.workdir+".agent") }},
	{name: "/tmp: a symlink to the harness dir's parent", where: "container", rootPlants: true,
		plant: `rmdir /tmp && ln -s {HP} /tmp`, restore: func(*raceTarget) { remakeDir("/tmp", 0o1777) }},
	{name: "/tmp: a FIFO", where: "container", rootPlants: true,
		plant: `rmdir /tmp && mkfifo /tmp`, restore: func(*raceTarget) { remakeDir("/tmp", 0o1777) }},
	{name: "/ (the visitor's root is built from its entries): 3,000 entries more, FIFOs, sockets and symlinks to /dev/urandom among them", where: "container", rootPlants: true,
		plant:   `env {CHILD} {BIN} {WD}/racer.stop {SECS} fill / 3000`,
		restore: func(rt *raceTarget) { removeJunk("/") }},
	{name: "/run/docker (listed for the host sockets the visitor masks): a FIFO", where: "container", rootPlants: true,
		plant:   `if test -e /run/docker; then ls -ld /run/docker; exit 3; fi; mkfifo /run/docker`,
		restore: func(rt *raceTarget) { unblockFIFO("/run/docker"); os.Remove("/run/docker") }, act: gradeAct(raceGrade, raceStall)},
	{name: "/run/user (listed by the daemon for the host sockets to mask): a FIFO", where: "host",
		plant:   `if test -e /run/user; then ls -ld /run/user; exit 3; fi; mkfifo /run/user`,
		restore: func(rt *raceTarget) { unblockFIFO("/run/user"); os.Remove("/run/user") }, act: gradeAct(raceStall, 0)},
	// The copy's role runs as the sandbox's root beyond the agent's limits:
	// caught as it starts, before it is undumpable.
	{name: "the copy's role, read from /proc as it starts",
		plant: `racer take-role sandboxd-cp`, act: cpAct, racer: roleNotTaken, undo: `rm -f {WD}/cp-race`},
	{name: "the harness dir's ancestors: the topmost renamed aside, a forged control socket served in its place",
		plant:   `rn {TOP} {TOP}.moved && racer fake-control {H}/run/control.sock`,
		restore: func(rt *raceTarget) { putBackDir(rt.top, rt.top+".moved") }, act: controlAct},
	// Races on the names grading used to make. Last: before b26c465 they
	// detach mounts of the sandbox, which later attempts would inherit.
	{name: "/tests: inotify on /, a new /tests renamed aside for a symlink to a decoy, turned to /proc/sys once a mount lands", rootPlants: true, gradings: 2,
		plant: `d=$(decoy sys) && test -w / && racer swap-new / tests $d /proc/sys`, racer: racerHits, restore: removeTests},
	{name: "/tests: the same, turned to the /logs/verifier mask", rootPlants: true, gradings: 2,
		plant: `d=$(decoy logs) && test -w / && racer swap-new / tests $d /logs/verifier`, racer: racerHits, restore: removeTests},
	{name: "/tests: the same, turned to the harness dir's parent (its mask)", rootPlants: true, gradings: 2,
		plant: `d=$(decoy harness) && test -w / && racer swap-new / tests $d {HP}`, racer: racerHits, restore: removeTests},
	// Last of all in a container: reading /dev/urandom as /etc/group never
	// ends where the read is unbounded, and a goroutine of the daemon's
	// spins on it for good.
	{name: "/etc/group: a symlink to /dev/urandom", where: "container", rootPlants: true,
		plant: `ln -sfn /dev/urandom /etc/group`, keep: []string{"/etc/group"}, act: ptyAct},
}

// removeTests takes away whatever an attack made of /tests, and puts back
// a /tests that was there at start.
func removeTests(*raceTarget) {
	made := []string{"/tests.aside", "/tests.decoy", "/tests.flip"}
	if _, had := dirIDs["/tests"]; had {
		putBackDir("/tests", made...)
		return
	}
	for _, p := range append(made, "/tests") {
		unblockFIFO(p)
		os.RemoveAll(p)
	}
}

// restoreLogs makes /logs the directory it was when serve started again.
func restoreLogs(*raceTarget) {
	unblockFIFO("/logs/verifier.agent")
	putBackDir("/logs", "/logs.aside", "/logs.decoy")
	if _, err := os.Lstat("/logs/verifier.agent"); err == nil {
		os.Rename("/logs/verifier.agent", "/logs/verifier")
	}
}

// remakeDir puts an empty directory back where an attack removed one (an
// image's directory on an overlay root cannot be renamed, only removed).
func remakeDir(path string, mode os.FileMode) {
	if st, err := os.Lstat(path); err == nil && st.IsDir() {
		return
	}
	unblockFIFO(path)
	os.Remove(path)
	os.Mkdir(path, mode)
	os.Chmod(path, mode)
}

// removeJunk removes what the racer's fill verb made in dir.
func removeJunk(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "junk-") {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// putBackDir makes path the directory it was when the attempt started: it
// is at path still, or at one of the names an attack moved it to. Whatever
// the agent put at path, and at the other names, goes.
func putBackDir(path string, aside ...string) {
	orig, ok := dirIDs[path]
	if !ok {
		return
	}
	if id, ok := idOf(path); !ok || id != orig {
		for _, a := range aside {
			if id, ok := idOf(a); ok && id == orig {
				os.RemoveAll(path)
				os.Rename(a, path)
				break
			}
		}
	}
	for _, a := range aside {
		if id, ok := idOf(a); ok && id != orig {
			os.RemoveAll(a)
		}
	}
}

type inode struct{ dev, ino uint64 }

// dirIDs are the directories that putBackDir restores, as they were at start.
var dirIDs = map[string]inode{}

func rememberDirs(paths ...string) {
	for _, p := range paths {
		if id, ok := idOf(p); ok {
			dirIDs[p] = id
		}
	}
}

func idOf(path string) (inode, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return inode{}, false
	}
	return inode{st.Dev, st.Ino}, true
}

// unblockFIFO lets whoever waits on the FIFO at path go (opening it for
// writing wakes a reader blocked in open, and closing it gives EOF).
func unblockFIFO(path string) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return
	}
	if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
	}
}

// savedFiles are files of the shared filesystem as they were before an
// attempt.
type savedFiles []savedFile

type savedFile struct {
	path   string
	data   []byte
	mode   os.FileMode
	exists bool
}

func saveFiles(paths []string) savedFiles {
	var out savedFiles
	for _, p := range paths {
		f := savedFile{path: p}
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			f.data, _ = os.ReadFile(p)
			f.mode, f.exists = st.Mode().Perm(), true
		}
		out = append(out, f)
	}
	return out
}

func (s savedFiles) putBack() {
	for _, f := range s {
		unblockFIFO(f.path)
		os.RemoveAll(f.path)
		if f.exists {
			os.WriteFile(f.path, f.data, f.mode)
			os.Chmod(f.path, f.mode)
		}
	}
}

// keepDir saves the regular files of dir and returns what puts them back:
// files added since go, files rewritten get their contents back.
func keepDir(dir string) func() {
	entries, _ := os.ReadDir(dir)
	had := map[string]bool{}
	var files []string
	for _, e := range entries {
		had[e.Name()] = true
		if e.Type().IsRegular() {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	saved := saveFiles(files)
	return func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !had[e.Name()] {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		saved.putBack()
	}
}

// mountDiff lists the mount table lines only one side has.
func mountDiff(before, after string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	b, a := in(before), in(after)
	var out []string
	for l := range b {
		if !a[l] && l != "" {
			out = append(out, "- "+l)
		}
	}
	for l := range a {
		if !b[l] && l != "" {
			out = append(out, "+ "+l)
		}
	}
	return clip(strings.Join(out, "\n"), 1500)
}

// ttyNr is the controlling terminal of this process (0 for none), from
// /proc/self/stat.
func ttyNr() int {
	b, _ := os.ReadFile("/proc/self/stat")
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 4 {
			n, _ := strconv.Atoi(f[4])
			return n
		}
	}
	return 0
}

// cttyCheck returns the check that the daemon — this process — has taken no
// controlling terminal since start. If it has, it lets go of it, so that
// the agent's pty hanging up cannot end the run.
func cttyCheck(signals *atomic.Int64) func() string {
	start := ttyNr()
	return func() string {
		now := ttyNr()
		if now == start {
			return ""
		}
		if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
			unix.IoctlSetInt(fd, unix.TIOCNOTTY, 0)
			unix.Close(fd)
		}
		return fmt.Sprintf("the daemon took the agent's pty as its controlling terminal (tty_nr %#x; %d terminal signals reached it: the agent's ^C, ^\\ or hang-up would stop serve)", now, signals.Load())
	}
}

// TestEscape_RacesHost makes the race class against a task served on this
// machine, as `sandboxd trial` serves it. The harness dir is two levels
// below a directory the test made, so that renaming the way to it touches
// nothing else of the machine.
func TestEscape_RacesHost(t *testing.T) {
	// In the container run the class is TestEscape_RacesContainer's.
	hostRunOnly(t)
	requireTools(t, "setsid", "mkfifo", "truncate")
	for _, a := range raceAgents {
		t.Run(a.name, func(t *testing.T) {
			top, err := os.MkdirTemp("/var/tmp", "sandboxd-race-")
			require.NoError(t, err)
			require.NoError(t, os.Chmod(top, 0o755))
			t.Cleanup(func() {
				putBackDir(top, top+".moved")
				os.RemoveAll(top)
			})
			harness := filepath.Join(top, "deep", "h-"+randomHex(6))
			require.NoError(t, os.MkdirAll(harness, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(harness, masks.HarnessMarker), nil, 0o600))
			// The racer is this binary, where uid 1000 can run it and
			// outside what the ancestor attack renames.
			binDir, err := os.MkdirTemp("/var/tmp", "sandboxd-race-bin-")
			require.NoError(t, err)
			require.NoError(t, os.Chmod(binDir, 0o755))
			t.Cleanup(func() { os.RemoveAll(binDir) })
			bin := filepath.Join(binDir, "attack.test")
			self, err := os.Executable()
			require.NoError(t, err)
			copyFile(t, self, bin, 0o755)

			r := serveTask(t, rolloutOptions{user: a.user, testScript: raceVerifier, harness: harness})
			rememberDirs("/logs", "/tests", top, r.workdir)
			// Grading copies the verdict files into the machine's
			// /logs/verifier, the tests' secret among them.
			verdicts := keepDir("/logs/verifier")
			t.Cleanup(func() { restoreLogs(nil); removeTests(nil); removeJunk("/logs"); verdicts() })
			rt := &raceTarget{
				where: "host", root: a.user == "0",
				harness: harness, top: top, workdir: r.workdir, bin: bin,
				holder: r.status.Sandbox.PID, secret: r.testsSecret,
				client: r.client, sshAddr: r.sshAddr, agentKey: r.agentKey,
				sh:    r.sh,
				leaks: r.leaks,
				record: func(name string, held bool, detail string) {
					t.Run(name, func(t *testing.T) { record(t, name, held, detail) })
				},
				broken: func(name, detail string) { t.Errorf("%s could not be set up: %s", name, detail) },
				ctty:   cttyCheck(new(atomic.Int64)),
				peers:  func() (int64, int64) { return 0, 0 },
			}
			rt.stopped = func(d time.Duration) bool {
				select {
				case err := <-r.done:
					r.done <- err // for serveTask's cleanup
					return true
				case <-time.After(d):
					return false
				}
			}
			rt.run(races)
			t.Logf("%s agent, host: %d attempts, %d held", a.name, rt.tried, rt.held)
		})
	}
}

// TestEscape_RacesContainer makes the race class inside a container, where
// the image's own files are the shared filesystem.
func TestEscape_RacesContainer(t *testing.T) {
	runInContainer(t, roleRacesInContainer)
}

const roleRacesInContainer = "races-in-container"

func init() { childproc.Add(roleRacesInContainer, racesInContainer) }

// racesInContainer is the container's side: pid 1, serving each agent in
// turn with the race class.
func racesInContainer(_ []string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "races-in-container: "+format+"\n", args...)
		return 1
	}
	// Terminal signals are counted, not obeyed: an attempt that gives the
	// daemon a controlling terminal must be seen, and must not end the run.
	var signals atomic.Int64
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGWINCH, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range sigs {
			signals.Add(1)
		}
	}()
	legit, forbidden, err := startBannerServices()
	if err != nil {
		return fail("%v", err)
	}
	// The image: a peer's target named in /etc/hosts, and a login shell for
	// root that the attempts replace (/bin/bash runs the attempts' scripts).
	if err := appendHosts("127.0.0.2 peerhost.test"); err != nil {
		return fail("%v", err)
	}
	if err := copyTo("/bin/bash", "/usr/local/bin/agent-shell", 0o755); err != nil {
		return fail("%v", err)
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	passwd = []byte(strings.Replace(string(passwd), "root:x:0:0:root:/root:/bin/bash", "root:x:0:0:root:/root:/usr/local/bin/agent-shell", 1))
	if err := os.WriteFile("/etc/passwd", passwd, 0o644); err != nil {
		return fail("passwd: %v", err)
	}
	// The non-root agent first: a root attempt that the daemon cannot
	// recover from must not cost the other agent its run.
	for _, a := range slices.Backward(raceAgents) {
		// Made now, like the host's: a directory of the image cannot be
		// renamed on an overlay root at all (EXDEV), which would hide
		// whether the daemon pins the way to the harness dir.
		top := "/srv/sandboxd-race-" + a.name
		harness := filepath.Join(top, "deep", "h-"+a.name+"-"+randomHex(4))
		s, err := serveInContainer(a.name, a.user, containerServeOptions{harness: harness, testScript: raceVerifier, configure: func(cfg *config.Config) error {
			cfg.SSH = config.SSH{Listen: "127.0.0.1:0"}
			// No proxy, hence no apt configuration bound into /etc, whose
			// rebuilt parent would pin /etc: the renaming attacks get their
			// chance. The peer is offered all the same.
			off := egress.Policy{Mode: egress.NoNetwork}
			cfg.Network = config.Network{Agent: off, Verifier: off, Peers: []config.Peer{{Name: "db", Port: 8080, Target: "peerhost.test:8080"}}}
			return nil
		}})
		if err != nil {
			return fail("%s: %v", a.name, err)
		}
		if a.user != "0" {
			os.Chown(s.workdir, 1000, 1000)
		}
		var keys map[string]string
		var st daemon.Status
		if err := s.client.Call(context.Background(), control.Request{Op: "keys"}, &keys); err != nil {
			return fail("keys: %v", err)
		}
		if err := s.client.Call(context.Background(), control.Request{Op: "status"}, &st); err != nil || st.SSH == nil {
			return fail("status: %v", err)
		}
		secrets := map[string]string{
			"harness dir": filepath.Base(harness), "task name": s.taskName, "tests": s.secret,
			"control socket": "control.sock", "agent private key": keyMaterial([]byte(keys["private_key"])),
		}
		rememberDirs("/logs", "/tests", "/etc", top, s.workdir)
		rt := &raceTarget{
			where: "container", root: a.user == "0",
			harness: harness, top: top, workdir: s.workdir, bin: "/opt/attack.test",
			holder: s.holder, secret: s.secret, client: s.client,
			sshAddr: st.SSH.Listen, agentKey: []byte(keys["private_key"]),
			sh: func(script string) result {
				return execResult(s.client, control.Request{Argv: []string{"/bin/bash", "-c", script}}, time.Minute)
			},
			leaks: func(out string) []string {
				var found []string
				for what, secret := range secrets {
					if strings.Contains(out, secret) {
						found = append(found, what)
					}
				}
				return found
			},
			record: func(name string, held bool, detail string) { report(a.name, name, held, detail) },
			broken: func(name, detail string) {
				b, _ := json.Marshal(containerAttempt{Agent: a.name, Name: name, Detail: detail, Broken: true})
				fmt.Printf("ATTEMPT %s\n", b)
			},
			ctty:  cttyCheck(&signals),
			peers: func() (int64, int64) { return legit.Load(), forbidden.Load() },
		}
		rt.stopped = func(d time.Duration) bool {
			select {
			case <-s.done:
				return true
			case <-time.After(d):
				return false
			}
		}
		rt.run(races)
		fmt.Printf("%s agent, container: %d attempts, %d held\n", a.name, rt.tried, rt.held)
		s.cancel()
	}
	return 0
}

func copyTo(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, mode)
}

// The racer: this binary run inside the sandbox as the agent, for what a
// shell cannot do fast enough or at all.
//
//	STOPFILE SECONDS swap-new DIR NAME DECOY FLIP
//	    inotify on DIR: when NAME is made there, wait until whoever made it
//	    opened it, rename it aside and put a symlink to DECOY in its place;
//	    when a mount lands in the agent's namespace, turn the symlink to
//	    FLIP ("-": never), so that an unmount by the same path hits FLIP.
//	STOPFILE SECONDS exchange A B
//	    renameat2(RENAME_EXCHANGE) of A and B in a loop, an even number of
//	    times in all.
//	STOPFILE SECONDS pty
//	    hold a pty master of the sandbox's devpts, print its slave, and
//	    watch whether anyone outside takes the slave as a controlling
//	    terminal (TIOCGSID on the master), signalling it with size changes.
//	STOPFILE SECONDS fake-control SOCK
//	    answer the control protocol at SOCK with a forged status and verdict.
//	STOPFILE SECONDS rename A B
//	    rename(2) A to B, and nothing else.
//	STOPFILE SECONDS take-role ARGV0
//	    poll /proc for processes whose argv[0] is ARGV0 and, from the first
//	    moment each is seen, try to read its environment and descriptors.
//	STOPFILE SECONDS fill DIR N
//	    make N entries junk-* in DIR: FIFOs, sockets, links to /dev/urandom
//	    and small files.
//
// Every verb prints "ready" once in place, stops at STOPFILE or after
// SECONDS, and prints what it did and "done".
const roleRacer = "attack-racer"

func init() { childproc.Add(roleRacer, racerMain) }

func racerMain(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "racer: STOPFILE SECONDS VERB ARGS...")
		return 2
	}
	secs, _ := strconv.Atoi(args[1])
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	stopped := func() bool {
		if time.Now().After(deadline) {
			return true
		}
		_, err := os.Stat(args[0])
		return err == nil
	}
	verbs := map[string]func([]string, func() bool) (string, error){
		"swap-new": racerSwapNew, "exchange": racerExchange, "pty": racerPTY,
		"fake-control": racerFakeControl, "fill": racerFill, "rename": racerRename,
		"take-role": racerTakeRole,
	}
	verb, ok := verbs[args[2]]
	if !ok {
		fmt.Fprintln(os.Stderr, "racer: unknown verb", args[2])
		return 2
	}
	summary, err := verb(args[3:], stopped)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(summary)
	fmt.Println("done")
	return 0
}

func racerSwapNew(a []string, stopped func() bool) (string, error) {
	if len(a) != 4 {
		return "", errors.New("swap-new DIR NAME DECOY FLIP")
	}
	dir, name, decoy, flip := a[0], a[1], a[2], a[3]
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return "", err
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return "", fmt.Errorf("watch %s: %w", dir, err)
	}
	fmt.Println("ready")
	p := filepath.Join(dir, name)
	hits, swaps, flips := 0, 0, 0
	buf := make([]byte, 64<<10)
	for !stopped() {
		if !pollFD(in, unix.POLLIN, 20*time.Millisecond) {
			continue
		}
		n, err := unix.Read(in, buf)
		if err != nil {
			continue
		}
		for _, ev := range inotifyNames(buf[:n]) {
			var st unix.Stat_t
			if ev != name || unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
				continue
			}
			hits++
			// Whoever made it opens, locks and checks it next: let them
			// (the lock shows in /proc/locks), then swap.
			// Whoever made it opens, locks and checks it next (within
			// microseconds), and mounts on it later (a process start
			// later): swap in between.
			time.Sleep(500 * time.Microsecond)
			mi, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			err = unix.Rename(p, p+".aside")
			fmt.Printf("made; rename aside: %v\n", errString(err))
			if err == nil && unix.Symlink(decoy, p) == nil {
				swaps++
				if flip != "-" && pollFD(mi, unix.POLLPRI, 3*time.Second) {
					if unix.Symlink(flip, p+".flip") == nil && unix.Rename(p+".flip", p) == nil {
						flips++
						fmt.Println("a mount landed; turned the link")
					}
				}
			}
			unix.Close(mi)
		}
	}
	return fmt.Sprintf("hits %d swaps %d flips %d", hits, swaps, flips), nil
}

// inotifyNames are the names of the inotify events in b.
func inotifyNames(b []byte) []string {
	var out []string
	for len(b) >= unix.SizeofInotifyEvent {
		n := int(binary.NativeEndian.Uint32(b[12:16]))
		if len(b) < unix.SizeofInotifyEvent+n {
			break
		}
		out = append(out, strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+n]), "\x00"))
		b = b[unix.SizeofInotifyEvent+n:]
	}
	return out
}

// pollFD waits at most d for events on fd.
func pollFD(fd int, events int16, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
	n, err := unix.Poll(fds, int(d.Milliseconds()))
	return err == nil && n > 0 && fds[0].Revents&(events|unix.POLLERR) != 0
}

func racerExchange(a []string, stopped func() bool) (string, error) {
	if len(a) != 2 {
		return "", errors.New("exchange A B")
	}
	fmt.Println("ready")
	n, tries := 0, 0
	for ; ; tries++ {
		if tries%64 == 0 {
			if stopped() {
				break
			}
			time.Sleep(20 * time.Microsecond)
		}
		if unix.Renameat2(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], unix.RENAME_EXCHANGE) == nil {
			n++
		}
	}
	// Leave the names as they were.
	for i := 0; n%2 == 1 && i < 1000; i++ {
		if unix.Renameat2(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], unix.RENAME_EXCHANGE) == nil {
			n++
		}
	}
	return fmt.Sprintf("exchanges %d of %d", n, tries), nil
}

func racerPTY(_ []string, stopped func() bool) (string, error) {
	m, err := unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(m)
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return "", err
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		return "", err
	}
	// A line for whoever reads the slave as a group file, so that a reader
	// does not wait for it.
	unix.Write(m, []byte("tty:x:5:\n"))
	fmt.Printf("slave /dev/pts/%d\n", n)
	fmt.Println("ready")
	taken, resized := 0, 0
	for !stopped() {
		if _, err := unix.IoctlGetInt(m, unix.TIOCGSID); err == nil {
			if taken == 0 {
				fmt.Println("the slave is the controlling terminal of a session outside the sandbox")
			}
			taken++
		}
		// A size change signals the terminal's foreground process group,
		// whoever that is.
		if unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(24 + resized%2), Col: 80}) == nil {
			resized++
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Sprintf("controlling terminal of an outside session %d times, resized %d times", taken, resized), nil
}

func racerFakeControl(a []string, stopped func() bool) (string, error) {
	if len(a) != 1 {
		return "", errors.New("fake-control SOCK")
	}
	if err := os.MkdirAll(filepath.Dir(a[0]), 0o755); err != nil {
		return "", err
	}
	ln, err := net.Listen("unix", a[0])
	if err != nil {
		return "", err
	}
	fmt.Println("ready")
	go func() {
		for !stopped() {
			time.Sleep(20 * time.Millisecond)
		}
		ln.Close()
	}()
	var served atomic.Int64
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		served.Add(1)
		go func() {
			defer c.Close()
			conn := control.NewConn(c)
			_, payload, err := conn.Read()
			if err != nil {
				return
			}
			var req control.Request
			json.Unmarshal(payload, &req)
			switch req.Op {
			case "grade":
				conn.WriteJSON(control.KindJSON, grade.Verdict{Status: grade.StatusGraded, Reward: map[string]float64{"reward": 1}, StdoutTail: "forged by the agent"})
			case "status":
				conn.WriteJSON(control.KindJSON, map[string]any{"phase": "agent", "sandbox": map[string]any{"pid": 4242}})
			default:
				conn.WriteJSON(control.KindError, control.Failure{Code: 125, Message: "forged by the agent"})
			}
		}()
	}
	return fmt.Sprintf("served %d forged answers", served.Load()), nil
}

func racerRename(a []string, _ func() bool) (string, error) {
	if len(a) != 2 {
		return "", errors.New("rename A B")
	}
	if err := unix.Rename(a[0], a[1]); err != nil {
		return "", fmt.Errorf("rename %s %s: %w", a[0], a[1], err)
	}
	return "renamed " + a[0] + " to " + a[1], nil
}

// racerTakeRole is a root agent after the daemon's own processes in its pid
// namespace: each one that is ARGV0, it tries to read from the moment its
// cmdline shows, as long as it lives.
func racerTakeRole(a []string, stopped func() bool) (string, error) {
	if len(a) != 1 {
		return "", errors.New("take-role ARGV0")
	}
	want := a[0] + "\x00"
	proc, err := os.Open("/proc")
	if err != nil {
		return "", err
	}
	defer proc.Close()
	fmt.Println("ready")
	tried := map[string]bool{}
	seen, read := 0, 0
	for !stopped() {
		proc.Seek(0, io.SeekStart)
		names, err := proc.Readdirnames(-1)
		if err != nil {
			return "", err
		}
		for _, pid := range names {
			if tried[pid] || pid[0] < '0' || pid[0] > '9' {
				continue
			}
			b, err := os.ReadFile("/proc/" + pid + "/cmdline")
			if err != nil || !strings.HasPrefix(string(b), want) {
				continue
			}
			tried[pid] = true
			seen++
			for !stopped() {
				// An exiting role's environ, its memory gone, opens and
				// reads empty on older kernels: only its words are a read.
				env, err := os.ReadFile("/proc/" + pid + "/environ")
				if err == nil && bytes.Contains(env, []byte("SANDBOXD_CHILD=")) {
					read++
					fmt.Printf("read the environment of %s: %q\n", pid, env)
					break
				}
				if _, err := os.Stat("/proc/" + pid); err != nil {
					break
				}
				if _, err := os.Readlink("/proc/" + pid + "/fd/0"); err == nil {
					read++
					fmt.Printf("read the descriptors of %s\n", pid)
					break
				}
			}
		}
	}
	return fmt.Sprintf("seen %d read %d", seen, read), nil
}

func racerFill(a []string, _ func() bool) (string, error) {
	if len(a) != 2 {
		return "", errors.New("fill DIR N")
	}
	n, _ := strconv.Atoi(a[1])
	made := 0
	for i := 0; i < n; i++ {
		p := filepath.Join(a[0], fmt.Sprintf("junk-%d", i))
		var err error
		switch i % 4 {
		case 0:
			err = unix.Mkfifo(p, 0o644)
		case 1:
			err = unix.Symlink("/dev/urandom", p)
		case 2:
			var fd int
			if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
				err = unix.Bind(fd, &unix.SockaddrUnix{Name: p})
				unix.Close(fd)
			}
		default:
			err = os.WriteFile(p, []byte("junk\n"), 0o644)
		}
		if err == nil {
			made++
		}
	}
	fmt.Println("ready")
	if made < n {
		return "", fmt.Errorf("made %d of %d entries in %s", made, n, a[0])
	}
	return fmt.Sprintf("made %d entries in %s", made, a[0]), nil
}
