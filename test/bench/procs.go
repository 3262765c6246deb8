package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/forkthread"
	"github.com/sandboxd/sandboxd/internal/procfs"
)

// bench is one run: its options, what it started, and what it measured.
type bench struct {
	opt      options
	cleanup  *cleanupStack
	tmp      string // the run's temporary directory, removed at the end
	machine  machine
	results  []*result
	egress   []*egressRow
	scaling  []*curve
	sections []section // tables of their own, after the scaling ones
	notes    []string  // facts worth printing with the report (verifications)
	failures []string
	elapsed  time.Duration
	skipped  []string // rows left out, with the reason
	// readyPhases are serve's start-up steps, in ms since its start.
	readyPhases map[string]samples

	main_   *daemon   // started on first use
	sshd_   *openSSH  // started on first use
	proxies *proxySet // started on first use
	docker  struct {  // the container of the docker rows, started on first use
		tried     bool
		name, why string
	}

	mu      sync.Mutex
	started []*exec.Cmd // every long-lived process, to check nothing survives
	logMu   sync.Mutex
}

func newBench(o options) *bench {
	return &bench{opt: o, cleanup: &cleanupStack{}}
}

func (b *bench) logf(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) debugf(format string, args ...any) {
	if b.opt.verbose {
		b.logf(format, args...)
	}
}

// pick returns full or quick by the run's mode.
func pick[T any](b *bench, full, quick T) T {
	if b.opt.quick {
		return quick
	}
	return full
}

// cleanupStack undoes the run's side effects, last first, exactly once.
type cleanupStack struct {
	mu    sync.Mutex
	steps []cleanupStep
}

type cleanupStep struct {
	name string
	fn   func()
}

func (c *cleanupStack) Add(name string, fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steps = append(c.steps, cleanupStep{name, fn})
}

func (c *cleanupStack) Run() {
	for {
		c.mu.Lock()
		n := len(c.steps)
		if n == 0 {
			c.mu.Unlock()
			return
		}
		step := c.steps[n-1]
		c.steps = c.steps[:n-1]
		c.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					fmt.Fprintf(os.Stderr, "[bench] cleanup %s: %v\n", step.name, r)
				}
			}()
			step.fn()
		}()
	}
}

// startProc starts a long-lived process in a process group of its own, with
// its output in logPath, and registers its end with the cleanup stack.
// stop is the signal that ends it gracefully.
func (b *bench) startProc(name string, cmd *exec.Cmd, logPath string, stop syscall.Signal) (*proc, error) {
	var logFile *os.File
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		logFile = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// Pdeathsig fires when the thread that forked the child exits, and the
	// runtime retires threads (a goroutine that ends locked to a thread in
	// a test host's namespace takes its thread along): fork from the one
	// thread that lives as long as the bench, as the daemon does.
	var err error
	forkthread.Do(func() { err = cmd.Start() })
	if err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{}), stop: stop}
	go func() {
		p.err = cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
	}()
	b.mu.Lock()
	b.started = append(b.started, cmd)
	b.mu.Unlock()
	b.cleanup.Add("stop "+name, func() { p.Stop(10 * time.Second) })
	return p, nil
}

// proc is a long-lived process the benchmark started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	stop syscall.Signal
}

func (p *proc) PID() int { return p.cmd.Process.Pid }

func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends the graceful signal, waits up to grace, then kills the whole
// process group; it returns once the process has been reaped.
func (p *proc) Stop(grace time.Duration) {
	pgid := p.cmd.Process.Pid
	if !p.Exited() {
		syscall.Kill(pgid, p.stop)
		select {
		case <-p.done:
		case <-time.After(grace):
			fmt.Fprintf(os.Stderr, "[bench] %s did not stop within %s; killing its process group\n", p.name, grace)
		}
	}
	// Whatever is left in its group (squid's helpers, sshd's children).
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// LogTail is the end of the process's log, for error messages.
func (p *proc) LogTail() string {
	if p.log == "" {
		return ""
	}
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// runCmd runs a short command and returns its combined output.
func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// timeRun runs cmd to completion and returns its wall time in milliseconds;
// a non-zero exit is an error carrying its output.
func timeRun(cmd *exec.Cmd) (float64, error) {
	var out bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &out
	}
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return ms(d), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// leftovers lists processes the benchmark started that are still alive, and
// the run's temporary paths that still exist.
func (b *bench) leftovers() string {
	var left []string
	b.mu.Lock()
	for _, c := range b.started {
		if c.Process != nil && c.ProcessState == nil {
			if err := syscall.Kill(c.Process.Pid, 0); err == nil || !errors.Is(err, syscall.ESRCH) {
				left = append(left, fmt.Sprintf("%s (pid %d)", filepath.Base(c.Path), c.Process.Pid))
			}
		}
	}
	b.mu.Unlock()
	if b.tmp != "" {
		if _, err := os.Stat(b.tmp); err == nil {
			left = append(left, b.tmp)
		}
	}
	return strings.Join(left, ", ")
}

// startServer starts a server that is to listen on 127.0.0.1:port (stopped
// with SIGTERM, its output in logPath) and waits until it accepts
// connections.
func (b *bench) startServer(ctx context.Context, name string, cmd *exec.Cmd, logPath string, port int) (*proc, string, error) {
	p, err := b.startProc(name, cmd, logPath, syscall.SIGTERM)
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ok := waitFor(ctx, 30*time.Second, 20*time.Millisecond, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil || p.Exited()
	})
	if !ok || p.Exited() {
		return nil, "", fmt.Errorf("%s did not start listening on %s: %s", name, addr, p.LogTail())
	}
	b.logf("%s listening on %s (pid %d)", name, addr, p.PID())
	return p, addr, nil
}

// freePort is a loopback TCP port nothing listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// kbField is the number after field (e.g. "VmRSS:") in a /proc file made of
// "Key: N kB" lines (status, smaps_rollup, meminfo); 0 when the file or the
// field is missing.
func kbField(path, field string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// rssKB is VmRSS of pid in KiB, from /proc/PID/status.
func rssKB(pid int) int {
	return kbField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
}

// pssKB is the proportional set size of pid (shared pages divided among
// their users), from smaps_rollup.
func pssKB(pid int) int {
	return kbField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
}

// procStat is one process's /proc/PID/stat.
type procStat struct {
	pid  int
	comm string   // field 2, without its parentheses
	rest []string // fields 3 on: rest[0] is the state, rest[1] the parent
}

// readStat reads /proc/PID/stat. The command name may hold spaces and
// parentheses: the fields are split after the last ')'.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	return procStat{pid: pid, comm: s[open+1 : end], rest: strings.Fields(s[end+1:])}, true
}

// processTree is pid and every process below it, parents first, each with
// the stat it was found by: one read of /proc/*/stat serves both the tree
// and the figures taken from it.
func processTree(pid int) []procStat {
	stats := map[int]procStat{}
	children := map[int][]int{}
	for _, p := range procfs.PIDs() {
		st, ok := readStat(p)
		if !ok || len(st.rest) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(st.rest[1])
		stats[p] = st
		children[pp] = append(children[pp], p)
	}
	var tree []procStat
	ids := []int{pid}
	for i := 0; i < len(ids); i++ {
		ids = append(ids, children[ids[i]]...)
		if st, ok := stats[ids[i]]; ok {
			tree = append(tree, st)
		}
	}
	return tree
}

// treeCPU is the CPU time, in ms, that pid and everything below it have used
// so far: user and system time of each live process, plus what each has
// collected from the children it reaped. (A reaped child's time is counted
// once, in the process that waited for it.)
func treeCPU(pid int) float64 {
	var ticks int64
	for _, st := range processTree(pid) {
		if len(st.rest) < 15 {
			continue
		}
		// rest[0] is field 3 of stat, so utime (14), stime, cutime, cstime
		// (17) are rest[11..14].
		for _, v := range st.rest[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return float64(ticks) * 1000 / clockTicks
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc.
const clockTicks = 100

// treePSS is the proportional set size, in KiB, of pid and the processes
// below it whose command name starts with comm: shared pages split among the
// processes that map them, the fair figure for a forking server like sshd.
func treePSS(pid int, comm string) int {
	kb := 0
	for _, st := range processTree(pid) {
		if strings.HasPrefix(st.comm, comm) {
			kb += pssKB(st.pid)
		}
	}
	return kb
}

// waitFor polls cond every step until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout, step time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(step):
		}
	}
	return cond()
}
