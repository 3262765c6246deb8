package attack

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// attempt is one thing an agent tries. Its script exits 0 when the attempt
// succeeded — an escape — and non-zero when it was refused; a check, when
// set, decides instead from what the script printed. Whatever the verdict,
// no output may contain a secret of the rollout.
type attempt struct {
	name string
	sh   string
	// check returns "" when the attempt held, else what got out.
	check func(x result) string
	// skipFor names an agent ("root" or "user") the attempt means nothing for.
	skipFor string
}

// expand fills the placeholders every script may use.
func (r *rollout) expand(s string, extra map[string]string) string {
	pairs := []string{
		"{H}", r.harness,
		"{TASK}", r.taskName,
		"{WD}", r.workdir,
		"{PY}", "/usr/bin/python3 " + r.workdir + "/attack.py",
		"{SSHPORT}", port(r.sshAddr),
		"{HOLDER}", fmt.Sprint(r.status.Sandbox.PID),
		"{SECRET}", r.testsSecret,
	}
	for k, v := range extra {
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// try makes every attempt as the rollout's agent and records each.
func (r *rollout) try(t *testing.T, agent string, attempts []attempt, extra map[string]string) {
	t.Helper()
	for _, a := range attempts {
		if a.skipFor == agent {
			continue
		}
		script := r.expand(a.sh, extra)
		start := time.Now()
		x := r.sh(script)
		if d := time.Since(start); d > 5*time.Second {
			t.Logf("%s took %s", a.name, d.Round(time.Millisecond))
		}
		if x.err != nil {
			t.Errorf("%s: the session itself failed: %v", a.name, x.err)
			continue
		}
		detail := fmt.Sprintf("exit %d\n%s", x.code, x.output())
		held := true
		if a.check != nil {
			if why := a.check(x); why != "" {
				held, detail = false, why+"\n"+detail
			}
		} else {
			switch {
			case x.code == 0:
				held = false
			case x.code >= 125:
				t.Errorf("%s: the attempt could not run (exit %d): %s", a.name, x.code, clip(x.output(), 500))
				continue
			}
		}
		// A path the script names may come back in an error message; only
		// what the agent did not already write counts as learnt.
		if leaked := r.leaksBeyond(x.output(), script); len(leaked) > 0 {
			held, detail = false, fmt.Sprintf("output names the harness (%s)\n%s", strings.Join(leaked, ", "), detail)
		}
		record(t, a.name, held, detail)
	}
}

// noLeak is the check of attempts that read what they can and must learn
// nothing: the secrets scan in try decides.
func noLeak(result) string { return "" }

// forAgents runs body once per agent, each against a rollout of its own.
func forAgents(t *testing.T, o rolloutOptions, body func(t *testing.T, agent string, r *rollout)) {
	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			o := o
			o.user = a.user
			r := serveTask(t, o)
			body(t, a.name, r)
		})
	}
}
