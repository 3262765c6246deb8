package task

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzParse checks that the task.toml reader never panics, that every error
// it returns carries a position or a key in the named file, and that a task it
// accepts holds the invariants the daemon relies on. Seeds live in
// testdata/fuzz/FuzzParse; the fixtures' task.toml files are added too.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(fixtures, "*", "task.toml"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse("fuzz.toml", data)
		if err != nil {
			checkProblems(t, "fuzz.toml", err)
			return
		}
		checkTask(t, tk)
	})
}

// FuzzParseSandboxd is FuzzParse for sandboxd.toml.
func FuzzParseSandboxd(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join(fixtures, "schema-1.3", "sandboxd.toml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[[peers]]\nname = \"db\"\nport = 5432\ntarget = \"db:5432\"\n[[peers]]\nname = \"x\"\nport = 0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sb, warns, err := ParseSandboxd("fuzz.toml", data)
		if err != nil {
			checkProblems(t, "fuzz.toml", err)
			return
		}
		checkWarnings(t, "fuzz.toml", warns)
		seen := map[string]bool{}
		for _, p := range sb.Peers {
			if p.Name == "" || p.Port < 1 || p.Port > 65535 || p.Target == "" || seen[p.Name] {
				t.Fatalf("accepted a bad or duplicate peer %+v", p)
			}
			seen[p.Name] = true
		}
		for _, c := range sb.EgressAllowCIDRs {
			if !c.IsValid() || c != c.Masked() {
				t.Fatalf("accepted prefix %v", c)
			}
		}
	})
}

func checkProblems(t *testing.T, file string, err error) {
	t.Helper()
	ps := problems(err)
	if len(ps) == 0 {
		t.Fatalf("error without problems: %v", err)
	}
	for _, p := range ps {
		var pos Pos
		switch e := p.(type) {
		case *FieldError:
			pos = e.Pos
			if e.Msg == "" {
				t.Fatalf("field error without a message: %#v", e)
			}
		case *UnsupportedError:
			pos = e.Pos
			if e.Feature == "" || e.Reason == "" {
				t.Fatalf("unsupported error without feature or reason: %#v", e)
			}
		default:
			t.Fatalf("error of type %T has no position: %v", p, p)
		}
		if pos.File != file {
			t.Fatalf("error names file %q, want %q: %v", pos.File, file, p)
		}
		if pos.Line <= 0 && pos.Key == "" {
			t.Fatalf("error has neither line nor key: %v", p)
		}
		if !strings.HasPrefix(p.Error(), file+":") {
			t.Fatalf("error text does not start with the file: %v", p)
		}
	}
}

func checkWarnings(t *testing.T, file string, warns []string) {
	t.Helper()
	if len(warns) > maxWarnings+1 {
		t.Fatalf("%d warnings, more than the bound", len(warns))
	}
	for _, w := range warns {
		if !strings.HasPrefix(w, file+":") {
			t.Fatalf("warning does not start with the file: %q", w)
		}
	}
}

func checkTask(t *testing.T, tk *Task) {
	t.Helper()
	checkWarnings(t, "fuzz.toml", tk.Warnings)
	for _, n := range []Network{tk.AgentNetwork(), tk.VerifierNetwork()} {
		switch n.Mode {
		case NetworkPublic, NetworkNone:
			if len(n.AllowedHosts) != 0 {
				t.Fatalf("hosts on a %s policy: %+v", n.Mode, n)
			}
		case NetworkAllowlist:
			if len(n.AllowedHosts) == 0 {
				t.Fatalf("empty allowlist accepted")
			}
		default:
			t.Fatalf("network mode %q", n.Mode)
		}
	}
	if tk.Verifier.Timeout <= 0 || tk.Agent.Timeout < 0 || tk.Environment.BuildTimeout <= 0 {
		t.Fatalf("bad timeouts: %v %v %v", tk.Verifier.Timeout, tk.Agent.Timeout, tk.Environment.BuildTimeout)
	}
	if tk.Environment.OS != "linux" {
		t.Fatalf("os %q accepted", tk.Environment.OS)
	}
	if tk.Environment.CPUs < 0 || tk.Environment.MemoryMB < 0 || tk.Environment.StorageMB < 0 || tk.Environment.GPUs < 0 {
		t.Fatalf("negative resources accepted: %+v", tk.Environment)
	}
	if err := tk.ExpandEnv(func(string) (string, bool) { return "v", true }); err != nil {
		t.Fatalf("expansion with every variable set failed: %v", err)
	}
	for _, e := range []Env{tk.AgentEnv(), tk.VerifierEnv(), tk.SolutionEnv()} {
		names := e.Names()
		for i, n := range names {
			if n == "" || strings.ContainsAny(n, "=\x00") || slices.Contains(names[:i], n) {
				t.Fatalf("bad or duplicate env name %q in %v", n, names)
			}
		}
	}
	for _, a := range tk.Agent.Env {
		if _, inBase := tk.Environment.Env.Lookup(a.Name); inBase {
			continue
		}
		if _, inOwn := tk.Verifier.Env.Lookup(a.Name); inOwn {
			continue
		}
		if _, leaked := tk.VerifierEnv().Lookup(a.Name); leaked {
			t.Fatalf("agent.env %s reached the verifier", a.Name)
		}
	}
}
