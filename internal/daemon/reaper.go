package daemon

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/procfs"
	"golang.org/x/sys/unix"
)

// zombieGrace is how long a zombie child must stay unreaped before the
// reaper takes it. Every process sandboxd starts has a goroutine blocked in
// wait for exactly that pid, which reaps it at once; only orphans re-parented
// to us stay zombies. Taking those after a grace period, never sooner, is what
// keeps the reaper from stealing a session's exit status (lesson 24).
const zombieGrace = time.Second

// ReapOrphans makes sandboxd a good container PID 1: orphans re-parented to
// it are reaped. When sandboxd is not PID 1 it does nothing. The returned
// function stops it.
func ReapOrphans(ctx context.Context, log *slog.Logger) (stop func()) {
	if os.Getpid() != 1 {
		return func() {}
	}
	return reapOrphans(ctx, log)
}

// reapOrphans reaps regardless of our pid; tests run it as a subreaper.
func reapOrphans(ctx context.Context, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(chld)
		seen := map[int]time.Time{}
		tick := time.NewTicker(zombieGrace)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-chld:
			case <-tick.C:
			}
			now := time.Now()
			current := map[int]time.Time{}
			for _, pid := range zombieChildren() {
				first, ok := seen[pid]
				if !ok {
					first = now
				}
				if now.Sub(first) >= zombieGrace {
					var ws unix.WaitStatus
					if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil {
						log.Debug("reaped orphan", "pid", pid, "status", ws.ExitStatus())
					}
					continue
				}
				current[pid] = first
			}
			seen = current
		}
	}()
	return func() { cancel(); <-done }
}

// zombieChildren lists our children that have exited and not been waited for.
func zombieChildren() []int {
	me := os.Getpid()
	var out []int
	for _, pid := range procfs.PIDs() {
		if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' && st.PPID == me {
			out = append(out, pid)
		}
	}
	return out
}
