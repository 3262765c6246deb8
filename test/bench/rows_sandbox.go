package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/forkthread"
)

// benchReady: `sandboxd serve` from start to ready (its control socket
// exists) against bare bwrap running `true` with the very same namespaces
// and mounts. The bare argv is not written by hand: it is what this
// sandboxd handed bwrap, captured once through a wrapper given to
// `serve --bwrap`, less the two descriptors only sandboxd's setup uses (the
// info fd and the user-namespace block fd, for the identity map that bare
// bwrap does not write). A check compares the mount tables of both.
func benchReady(ctx context.Context, b *bench) error {
	argv, err := b.captureBwrapArgs(ctx)
	if err != nil {
		return err
	}
	if err := b.verifyBareMounts(argv); err != nil {
		return err
	}
	harness := harnessDir("ready")
	b.cleanup.Add("remove "+harness, func() { os.RemoveAll(harness) })
	rounds := pick(b, 30, 5)
	s, err := alternate(ctx, 2, rounds,
		argv.time,
		func() (float64, error) { return b.serveReady(ctx, harness) },
	)
	if err != nil {
		return err
	}
	r := b.addPair("ready", "Sandbox ready", "ms", "bare bwrap … true", s, 2, true)
	r.detail = "sandboxd: `serve` started → control socket created (fresh harness dir each time: host and agent keys generated, the egress listeners made inside the sandbox); bwrap: fork → exit of `true`"
	var phases []string
	for _, ph := range readyPhases {
		if v := b.readyPhases[ph.msg]; len(v) > 0 {
			phases = append(phases, fmt.Sprintf("%s %.1f ms", ph.name, v.median()))
		}
	}
	if len(phases) > 0 {
		r.detail += "; where serve's time goes, from its own log (median ms since start): " + strings.Join(phases, ", ")
	}
	return nil
}

// readyPhases are the log lines of serve that mark its start-up steps.
var readyPhases = []struct{ msg, name string }{
	{"sandbox ready", "holder ready (bwrap probed and started, id map written, readiness line read)"},
	{"network ready", "egress listeners made inside the sandbox"},
	{"ssh listening", "SSH keys and listener"},
	{"serving", "control socket"},
}

// recordPhases reads serve's text log and records, for each start-up step,
// the time since t0 at which it was logged.
func (b *bench) recordPhases(logPath string, t0 time.Time) {
	raw, err := os.ReadFile(logPath)
	if err != nil {
		return
	}
	if b.readyPhases == nil {
		b.readyPhases = map[string]samples{}
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		ts, rest, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok {
			continue
		}
		for _, ph := range readyPhases {
			if seen[ph.msg] || !(strings.Contains(rest, "msg=\""+ph.msg+"\"") || strings.Contains(rest, "msg="+ph.msg+" ")) {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				continue
			}
			seen[ph.msg] = true
			b.readyPhases[ph.msg] = append(b.readyPhases[ph.msg], ms(t.Sub(t0)))
		}
	}
}

// bwrapArgs is a captured bwrap invocation, replayable.
type bwrapArgs struct {
	bwrap string
	opts  []string // the --args document, less the info and block fds
	data  map[int]string
	tmp   string
	// The mount table of the holder it came from, read while it ran.
	holderMounts string
}

// captureBwrapArgs starts serve once with a wrapper in place of bwrap that
// saves its --args memfd and its data memfds, then stops it.
func (b *bench) captureBwrapArgs(ctx context.Context) (*bwrapArgs, error) {
	real, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	dir := filepath.Join(b.tmp, "bwrap-capture")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	wrapper := filepath.Join(dir, "bwrap")
	script := fmt.Sprintf(`#!/bin/sh
# Saves the memfds sandboxd hands bwrap (opening /proc/self/fd/N makes a new
# file description: bwrap's own offset is untouched), then runs bwrap.
if [ "$1" = "--args" ]; then
  for fd in 3 6 7 8 9 10 11 12; do
    case "$(readlink /proc/self/fd/$fd 2>/dev/null)" in
      /memfd:*) cat /proc/self/fd/$fd > %[1]s/fd$fd ;;
    esac
  done
fi
exec %[2]s "$@"
`, dir, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return nil, err
	}
	d, err := b.startDaemon(ctx, "capture", "--bwrap", wrapper)
	if err != nil {
		return nil, err
	}
	holderMounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", d.holder))
	d.p.Stop(10 * time.Second)
	os.RemoveAll(d.harness)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "fd3"))
	if err != nil {
		return nil, fmt.Errorf("the wrapper did not capture bwrap's --args: %w", err)
	}
	a := &bwrapArgs{bwrap: real, data: map[int]string{}, tmp: dir, holderMounts: string(holderMounts)}
	opts := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	for i := 0; i < len(opts); i++ {
		if opts[i] == "--info-fd" || opts[i] == "--userns-block-fd" {
			i++
			continue
		}
		a.opts = append(a.opts, opts[i])
	}
	for fd := 6; fd <= 12; fd++ {
		p := filepath.Join(dir, fmt.Sprintf("fd%d", fd))
		if _, err := os.Stat(p); err == nil {
			a.data[fd] = p
		}
	}
	b.notes = append(b.notes, fmt.Sprintf("Bare bwrap replays the %d options this sandboxd gave bwrap (captured through `serve --bwrap WRAPPER`), less `--info-fd` and `--userns-block-fd`.", len(a.opts)))
	return a, nil
}

// command is bare bwrap running argv with the captured options; closeFiles
// closes the descriptors it hands bwrap, once it has run.
func (a *bwrapArgs) command(argv ...string) (cmd *exec.Cmd, closeFiles func(), err error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	optsFile, err := os.CreateTemp(a.tmp, "args-")
	if err != nil {
		return nil, nil, err
	}
	os.Remove(optsFile.Name())
	optsFile.WriteString(strings.Join(a.opts, "\x00") + "\x00")
	optsFile.Seek(0, 0)
	files = append(files, optsFile)
	null, err := os.Open(os.DevNull)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	files = append(files, null)
	extra := []*os.File{optsFile, null, null} // fds 3, 4, 5
	for fd := 6; fd <= 12; fd++ {
		p, ok := a.data[fd]
		if !ok {
			break
		}
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		files = append(files, f)
		extra = append(extra, f)
	}
	cmd = exec.Command(a.bwrap, append([]string{"--args", "3", "--"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.ExtraFiles = extra
	return cmd, closeAll, nil
}

// time runs bare bwrap with `true` and returns its wall time in ms.
func (a *bwrapArgs) time() (float64, error) {
	cmd, closeFiles, err := a.command("true")
	if err != nil {
		return 0, err
	}
	defer closeFiles()
	return timeRun(cmd)
}

// verifyBareMounts compares the mount points of a bare bwrap with those of
// the holder the options were captured from.
func (b *bench) verifyBareMounts(a *bwrapArgs) error {
	cmd, closeFiles, err := a.command("cat", "/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	err = cmd.Run()
	closeFiles()
	if err != nil {
		return fmt.Errorf("bare bwrap: %w", err)
	}
	bare, ours := mountPoints(out.String()), mountPoints(a.holderMounts)
	if slices.Equal(bare, ours) {
		b.notes = append(b.notes, fmt.Sprintf("Checked: bare bwrap's mount table has the same %d mount points, in the same order, as the holder of `sandboxd serve`.", len(ours)))
		return nil
	}
	b.notes = append(b.notes, fmt.Sprintf("Mount tables differ: bare bwrap %d mount points, sandboxd's holder %d (a mount made on the host in between propagates into the holder).", len(bare), len(ours)))
	b.logf("mount points differ: bare %v\nholder %v", bare, ours)
	return nil
}

func mountPoints(mountinfo string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

// serveReady starts serve on a fresh harness dir, returns the time until its
// control socket exists, and stops it again.
func (b *bench) serveReady(ctx context.Context, harness string) (float64, error) {
	os.RemoveAll(harness)
	runDir := filepath.Join(harness, "run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return 0, err
	}
	defer os.RemoveAll(harness)
	// inotify, not polling: the benchmark must not take CPU from the daemon
	// it is timing on two cores.
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ifd)
	if _, err := unix.InotifyAddWatch(ifd, runDir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return 0, err
	}
	log, err := os.Create(filepath.Join(b.tmp, "serve-ready.log"))
	if err != nil {
		return 0, err
	}
	defer log.Close()
	cmd := b.serveCmd(harness)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	forkthread.Do(func() { err = cmd.Start() }) // Pdeathsig: see startProc
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	deadline := t0.Add(30 * time.Second)
	buf := make([]byte, 4096)
	for {
		pfd := []unix.PollFd{{Fd: int32(ifd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(time.Until(deadline)/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			stop()
			return 0, err
		}
		if n > 0 {
			if found := inotifyNames(ifd, buf, "control.sock"); found {
				d := time.Since(t0)
				stop()
				b.recordPhases(log.Name(), t0)
				return ms(d), nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			tail, _ := os.ReadFile(log.Name())
			return 0, fmt.Errorf("serve did not become ready within 30s: %s", tail)
		}
	}
}

// inotifyNames reads the pending events and says whether name was created.
func inotifyNames(fd int, buf []byte, name string) bool {
	found := false
	for {
		n, err := unix.Read(fd, buf)
		if n <= 0 || err != nil {
			return found
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			if string(bytes.TrimRight(nameBytes, "\x00")) == name {
				found = true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// benchExecCLI: `sandboxd exec -- true` against the bare chain a session
// would be without sandboxd (nsenter into the same holder, setpriv to the
// same user and capability bound, env -i, true), and against `docker exec`
// into a running container of the project's bookworm base image. Each peer
// alternates with sandboxd in a run of its own: a `docker exec` leaves
// dockerd, containerd and the shim working for milliseconds after it
// returns, which landed in the next samples of the other two and doubled
// both (nsenter 4.4 ms and sandboxd 11.3 ms interleaved with it, 3.8 and
// 4.4 ms without).
func benchExecCLI(ctx context.Context, b *bench) error {
	d, err := b.mainDaemon(ctx)
	if err != nil {
		return err
	}
	chain := []string{"--target", fmt.Sprint(d.holder)}
	for _, ns := range d.ns { // status names them as /proc/PID/ns does
		chain = append(chain, nsenterFlag[ns])
	}
	chain = append(chain, "--", "setpriv", "--reuid=0", "--regid=0", "--clear-groups",
		"--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+sys_chroot,+mknod,+audit_write,+setfcap",
		"--inh-caps=-all", "--", "env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "true")
	bare := func() (float64, error) {
		cmd := exec.Command("nsenter", chain...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		return timeRun(cmd)
	}
	ours := func() (float64, error) { return timeRun(b.execCmd(d, "true")) }
	rounds := pick(b, 100, 10)
	s, err := alternate(ctx, 3, rounds, bare, ours)
	if err != nil {
		return err
	}
	r := b.addPair("exec-nsenter", "`sandboxd exec -- true`", "ms", "nsenter → setpriv → env -i → true", s, 1, true)
	r.detail = "wall time of the CLI process (control socket → join → exit status) vs the bare chain into the same holder"
	ctr, why := b.dockerContainer(ctx)
	if ctr == "" {
		b.skipped = append(b.skipped, "`docker exec` row: "+why)
		b.logf("docker exec row skipped: %s", why)
		return nil
	}
	docker := func() (float64, error) { return timeRun(exec.Command("docker", "exec", ctr, "true")) }
	if s, err = alternate(ctx, 3, rounds, docker, ours); err != nil {
		return err
	}
	r = b.addPair("exec-docker", "`sandboxd exec -- true`", "ms", "`docker exec CTR true`", s, 0.5, true)
	r.detail = "container of `images/base.sh bookworm`, started once with `--network none`; alternated with sandboxd in a run of its own"
	return nil
}

// dockerContainer starts one container of the bookworm base image, on first
// use, and returns its name, or "" and the reason docker cannot be used.
func (b *bench) dockerContainer(ctx context.Context) (string, string) {
	if !b.docker.tried {
		b.docker.tried = true
		b.docker.name, b.docker.why = b.startDockerContainer(ctx)
	}
	return b.docker.name, b.docker.why
}

func (b *bench) startDockerContainer(ctx context.Context) (string, string) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", "no docker CLI on this machine"
	}
	if out, err := runCmd(ctx, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		return "", "the Docker engine does not answer: " + firstLine(out)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(b.opt.repo, "images", "base.sh"), "bookworm").Output()
	if err != nil {
		return "", fmt.Sprintf("images/base.sh bookworm failed: %v", err)
	}
	tag := strings.TrimSpace(string(out))
	name := fmt.Sprintf("sandboxd-bench-%d", os.Getpid())
	b.cleanup.Add("docker rm "+name, func() { exec.Command("docker", "rm", "-f", name).Run() })
	if out, err := runCmd(ctx, "docker", "run", "-d", "--rm", "--name", name, "--network", "none", tag, "sleep", "infinity"); err != nil {
		return "", "docker run failed: " + firstLine(out)
	}
	b.logf("docker container %s from %s", name, tag)
	return name, ""
}

// nsenterFlag is nsenter's option for each /proc/PID/ns name.
var nsenterFlag = map[string]string{
	"user": "--user", "mnt": "--mount", "pid": "--pid", "uts": "--uts",
	"ipc": "--ipc", "net": "--net", "cgroup": "--cgroup",
}
