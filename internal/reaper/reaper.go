// Package reaper reaps the zombie children that nothing waits for, and
// never one that something does: the daemon's part as a container's PID 1
// and as the parent of what it joins into the sandbox.
package reaper

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/procfs"
)

// The daemon is the parent of more processes than it starts. What it joins
// into the sandbox's pid namespace is its child by clone(CLONE_PARENT)
// (pkg/join), and any process in the sandbox can do the same: a copy that a
// session makes with CLONE_PARENT is the daemon's child too, and nothing of
// the daemon waits for it. As a container's PID 1 it also inherits the
// container's orphans. Such a child stays a zombie until it is reaped, and a
// zombie of the sandbox's pid namespace also holds the sandbox's pid 1 in its
// exit (a pid namespace ends only once all of its processes are reaped), so
// serve's end would wait for the holder until it gave up.
//
// So the daemon reaps every zombie child that nothing waits for, PID 1 or
// not, and never one that something does wait for, which would steal a
// session's exit status
// (docs/failures.md#reaper-never-takes-a-session-exit-status).
// Every process the daemon starts is an os.Process, which holds a pidfd from
// its start until Wait has reaped it: a zombie child with a pidfd is left to
// its waiter. One without is taken once it is older
// than zombieGrace (join's own short-lived copies, waited by pid, are
// younger) and has stayed a zombie for zombieSettle (a waiter reaps at
// once). Where the runtime holds no pidfd at all (a kernel or seccomp
// profile without them: Go then waits by pid) only the older rule is left:
// a zombie that nothing reaped for zombieGrace.
const (
	zombieGrace  = time.Second
	zombieSettle = 100 * time.Millisecond
)

// Start reaps, until the returned function is called, this process's
// zombie children that nothing waits for.
func Start(log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reapUntil(ctx, log)
	}()
	return func() { cancel(); <-done }
}

func reapUntil(ctx context.Context, log *slog.Logger) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	seen := map[int]time.Time{} // zombie children, and when each was first seen as one
	next := time.NewTimer(zombieGrace)
	defer next.Stop()
	due := time.Now().Add(zombieGrace) // when next fires
	var last time.Time                 // the last look
	for {
		select {
		case <-ctx.Done():
			return
		case <-chld:
			// A look reads every thread's children file once some child
			// is waitable, and a SIGCHLD is almost always a session's
			// command, whose waiter reaps it within microseconds: a look
			// lookDelay later finds nothing waitable and reads nothing,
			// where one at once read them all on every exec. Under many
			// concurrent sessions children exit hundreds of times a
			// second: within lookGap of the last look, one more look at
			// its end serves the whole burst. Nothing is reaped sooner
			// than zombieSettle after it was first seen, so a zombie is at
			// most lookGap later to be taken.
			at := time.Now().Add(lookDelay)
			if gap := last.Add(lookGap); gap.After(at) {
				at = gap
			}
			if at.Before(due) {
				next.Reset(time.Until(at))
				due = at
			}
			continue
		case <-next.C:
		}
		last = time.Now()
		again := reapOnce(seen, log)
		next.Reset(again)
		due = last.Add(again)
	}
}

// lookGap is the shortest time between two looks that SIGCHLD makes. Each
// look reads the children file of every thread (64 and more), which at a
// look every 25 ms was a twentieth of the daemon's CPU under a hundred
// concurrent execs.
const lookGap = zombieSettle

// lookDelay is how long after a SIGCHLD the reaper looks: long enough for
// a waiter to have reaped its child, short beside zombieSettle.
const lookDelay = 20 * time.Millisecond

// reapOnce reaps the zombie children that are due, remembers the others in
// seen, and says when to look again.
func reapOnce(seen map[int]time.Time, log *slog.Logger) (again time.Duration) {
	again = zombieGrace
	zombies := Zombies()
	if len(zombies) == 0 {
		clear(seen)
		return again
	}
	now, uptime := time.Now(), bootTicks()
	// Which zombies something waits for (a pidfd held) is read only once
	// one of them has been a zombie for zombieSettle, the shortest wait
	// there is: reading it is a readlink of every descriptor the daemon
	// holds, and most zombies are reaped by their waiter before then.
	var waited map[int]bool
	pidfds := true
	for pid := range zombies {
		if first, ok := seen[pid]; ok && now.Sub(first) >= zombieSettle {
			waited, pidfds = pidfdsHeld()
			break
		}
	}
	current := map[int]time.Time{}
	for pid, st := range zombies {
		if waited[pid] {
			continue
		}
		first, ok := seen[pid]
		if !ok {
			first = now
		}
		due := zombieGrace
		if pidfds && uptime > st.Start && time.Duration(uptime-st.Start)*tick >= zombieGrace {
			due = zombieSettle
		}
		if left := due - now.Sub(first); left > 0 {
			current[pid] = first
			again = min(again, left)
			continue
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil {
			log.Debug("reaped a child nothing waited for", "pid", pid, "status", ws.ExitStatus())
		}
	}
	clear(seen)
	for pid, first := range current {
		seen[pid] = first
	}
	return again
}

// Zombies lists this process's children that have exited and not been
// waited for.
//
// It runs on every SIGCHLD, so it reads only what can hold such a child:
// none at all when waitid says no child has exited, else this process's
// own children (each thread's children file) rather than every process in
// the pid namespace — which, with the sandbox's processes in it, made the
// reaper half the daemon's CPU under 100 concurrent SSH execs.
func Zombies() map[int]procfs.Stat {
	me := os.Getpid()
	out := map[int]procfs.Stat{}
	if !anyExited() {
		return out
	}
	for _, pid := range children() {
		// Under load most children are running commands: a waitid(2) that
		// leaves the child as it is tells those apart without opening
		// their stat files, which made half of what a look cost.
		if !exited(pid) {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' && st.PPID == me {
			out[pid] = st
		}
	}
	return out
}

// exited says whether the child pid has exited and not been waited for.
func exited(pid int) bool { return waitable(unix.P_PID, pid) }

// anyExited says whether some child of this process has exited and not been
// waited for.
func anyExited() bool { return waitable(unix.P_ALL, 0) }

// waitable says whether a child that idtype and id select has exited and
// not been waited for, without waiting for it (WNOWAIT leaves it to its
// waiter); __WALL counts children whatever signal they send their parent at
// exit. On an error other than "no such child" it says yes, so that the
// caller looks.
func waitable(idtype, id int) bool {
	var info unix.Siginfo
	if err := unix.Waitid(idtype, id, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil); err != nil {
		return !errors.Is(err, unix.ECHILD)
	}
	// With WNOHANG and no child exited, Linux writes a siginfo of zeros;
	// one that names a child carries SIGCHLD.
	return info.Signo == int32(unix.SIGCHLD)
}

// childrenListed counts the looks that read every thread's children file,
// the costly part of a look; the tests read it to see that a waited child
// costs none.
var childrenListed atomic.Int64

// children lists this process's children: those of each of its threads, as
// /proc/self/task/TID/children shows them (a child belongs to the thread
// that made it, and passes to another when that thread exits). Without
// those files (a kernel built without CONFIG_PROC_CHILDREN) it is every
// process of the pid namespace, which the caller then filters by parent. A
// child passed on to a thread that was read already is missed until the
// next look, which the reaper's timer makes.
func children() []int {
	childrenListed.Add(1)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return procfs.PIDs()
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat("/proc/self/task/" + t.Name()); serr == nil {
					return procfs.PIDs() // the file does not exist on this kernel
				}
			}
			continue // the thread has exited
		}
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// pidfdsHeld lists the processes this one holds a pidfd for, and says
// whether it holds any.
func pidfdsHeld() (pids map[int]bool, any bool) {
	pids = map[int]bool{}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return pids, false
	}
	for _, e := range entries {
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || link != "anon_inode:[pidfd]" {
			continue
		}
		any = true
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(info))
		for sc.Scan() {
			if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("Pid:")); ok {
				if pid, err := strconv.Atoi(string(bytes.TrimSpace(v))); err == nil {
					pids[pid] = true
				}
			}
		}
	}
	return pids, any
}

// tick is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// architecture Linux runs on.
const tick = 10 * time.Millisecond

// bootTicks is the time since boot in ticks, the clock of procfs.Stat.Start.
func bootTicks() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano() / int64(tick))
}
