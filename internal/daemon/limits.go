package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/cgroup"
)

// DefaultAgentMaxProcs is serve's default RLIMIT_NPROC for a non-root agent
// user: far above what builds and test suites start, far below what takes a
// machine down.
const DefaultAgentMaxProcs = 4096

// sessionOOMScoreAdj puts every agent process ahead of the daemon in the
// OOM killer's order (the daemon stays at 0, or lower when it may).
const sessionOOMScoreAdj = 500

// daemonOOMScoreAdj is what the daemon asks for itself; lowering a score
// takes CAP_SYS_RESOURCE, which Docker's default set lacks.
const daemonOOMScoreAdj = -500

// limits is what `status` reports as enforced on the agent's side.
type limits struct {
	Cgroup             string `json:"cgroup"`
	AgentMaxProcs      uint64 `json:"agent_max_procs"`
	AgentMaxProcsNote  string `json:"agent_max_procs_note"`
	SessionOOMScoreAdj int    `json:"session_oom_score_adj"`
	DaemonOOMScoreAdj  int    `json:"daemon_oom_score_adj"`
	// GradingReserve is the room set aside on the harness dir's filesystem
	// for the next grading (0 while a grading uses it, or when none could be).
	GradingReserve int64 `json:"grading_reserve_bytes"`
}

// applyLimits lowers the daemon's own OOM score where it may and says what
// holds for the agent.
func (d *Daemon) applyLimits() limits {
	l := limits{
		Cgroup:             "none: " + d.cgroupNote + "; the container engine's limits (docker run --memory, --cpus, --pids-limit) apply to the whole container",
		AgentMaxProcs:      d.target.Limits.MaxProcs,
		AgentMaxProcsNote:  "RLIMIT_NPROC for a non-root agent user; the kernel exempts root",
		SessionOOMScoreAdj: d.target.Limits.OOMScoreAdj,
	}
	if d.cgroup != nil {
		l.Cgroup = d.cgroup.String()
		l.AgentMaxProcsNote = "the pid limit of the agent's cgroup (root included), and RLIMIT_NPROC for a non-root agent user"
	}
	if d.target.Limits.MaxProcs == 0 {
		l.AgentMaxProcsNote = "no limit (--agent-max-procs 0)"
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(daemonOOMScoreAdj)), 0); err != nil {
		d.log.Info("daemon keeps its OOM score", "reason", fmt.Sprintf("%v (lowering it takes CAP_SYS_RESOURCE)", err))
	}
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		l.DaemonOOMScoreAdj, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return l
}

func (d *Daemon) statusLimits() limits {
	l := d.limits
	l.GradingReserve = d.reserved.Load()
	return l
}

// cgroupLimits are the agent's cgroup limits: the task's memory and cpus,
// and --agent-max-procs as the pid limit, which holds for a root agent too.
func (d *Daemon) cgroupLimits() cgroup.Limits {
	l := cgroup.Limits{Pids: int64(d.cfg.AgentMaxProcs)}
	if t := d.cfg.Task; t != nil {
		l.MemoryBytes = t.Environment.MemoryMB << 20
		l.CPUs = t.Environment.CPUs
	}
	return l
}

// removeCgroup removes the agent's cgroup once the sandbox's processes are
// gone (they die with the holder, a moment after it).
func (d *Daemon) removeCgroup() {
	if d.cgroup == nil {
		return
	}
	var err error
	for range 100 {
		if err = d.cgroup.Remove(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.log.Warn("remove the agent's cgroup", "err", err)
}

// agentCgroupPrefix names an agent's cgroup, followed by its holder's pid.
const agentCgroupPrefix = "sandboxd-agent-"

// holderGone says whether the holder an agent cgroup is named after has
// ended: its group is a leftover of a daemon that was killed.
func holderGone(name string) bool {
	pid, err := strconv.Atoi(strings.TrimPrefix(name, agentCgroupPrefix))
	if err != nil {
		return false
	}
	return unix.Kill(pid, 0) == unix.ESRCH
}
