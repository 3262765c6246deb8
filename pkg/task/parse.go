package task

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// knownSchemaVersions are the task.toml schema versions this package reads in full.
var knownSchemaVersions = []string{"1.0", "1.1", "1.2", "1.3", "1.4"}

// Parse reads task.toml's content; name is the file name used in errors and
// warnings. Every problem is reported, in file order, as a *FieldError or an
// *UnsupportedError (joined with errors.Join when there are several).
func Parse(name string, data []byte) (*Task, error) {
	d, err := newDoc(name, data)
	if err != nil {
		return nil, err
	}
	t := &Task{envPos: map[string]map[string]Pos{}}
	root := d.root()
	t.readTop(root)

	if task, ok := root.sub("task"); ok {
		t.Info = readInfo(task)
		task.done()
	}
	if v, p, ok := root.take("metadata"); ok {
		if m, ok := v.(map[string]any); ok {
			t.Metadata = m
		} else {
			root.wrongType(p, v, "a table", "[metadata] with free-form keys below it")
		}
	}

	env, _ := root.sub("environment")
	t.readEnvironment(env)
	base := Network{Mode: t.Environment.NetworkMode, AllowedHosts: t.Environment.AllowedHosts}

	t.Verifier.Timeout = DefaultVerifierTimeout
	if v, ok := root.sub("verifier"); ok {
		t.readVerifier(v)
		pol := readPolicy(v)
		t.Verifier.NetworkMode, t.Verifier.AllowedHosts = pol.mode, pol.hosts
		t.verifierNet = pol.resolve(base)
		v.done()
	} else {
		t.verifierNet = policy{}.resolve(base)
	}

	if a, ok := root.sub("agent"); ok {
		if dur, ok := a.seconds("timeout_sec", false, "3600"); ok {
			t.Agent.Timeout = dur
		}
		t.Agent.User = readUser(a)
		t.Agent.Env = t.readEnv(a, "agent.env")
		pol := readPolicy(a)
		t.Agent.NetworkMode, t.Agent.AllowedHosts = pol.mode, pol.hosts
		t.agentNet = pol.resolve(base)
		a.done()
	} else {
		t.agentNet = policy{}.resolve(base)
	}

	if s, ok := root.sub("solution"); ok {
		t.Solution.Env = t.readEnv(s, "solution.env")
		s.done()
	}

	if root.has("steps") {
		_, p, _ := root.take("steps")
		d.unsupported(p, "multi-step tasks",
			"[[steps]] asks for several agent and verifier rounds; sandboxd serves one agent phase and one verify phase per rollout. Serve each step as its own task")
	}
	if root.has("multi_step_reward_strategy") {
		_, p, _ := root.take("multi_step_reward_strategy")
		d.unsupported(p, "multi-step tasks",
			"multi_step_reward_strategy combines the rewards of [[steps]], which sandboxd does not serve; remove it, and serve each step as its own task")
	}
	root.done()

	if err := d.err(); err != nil {
		return nil, err
	}
	t.Warnings = d.warningTexts()
	_ = t.ExpandEnv(noHost) // the daemon calls it again with the host's environment
	return t, nil
}

func (t *Task) readTop(root *table) {
	d := root.d
	sv, hasSV := root.str("schema_version")
	ver, hasVer := root.str("version")
	switch {
	case hasSV:
		t.SchemaVersion = sv
		if hasVer && ver != sv {
			d.warn(keyPath{}.Child("version"), "version %q ignored: schema_version %q takes precedence", ver, sv)
		}
	case hasVer:
		t.SchemaVersion = ver
	}
	if t.SchemaVersion != "" && !slices.Contains(knownSchemaVersions, t.SchemaVersion) {
		key := "schema_version"
		if !hasSV {
			key = "version"
		}
		d.warn(keyPath{}.Child(key), "schema version %q is not one sandboxd knows (%s): keys it does not know are ignored with a warning",
			t.SchemaVersion, strings.Join(knownSchemaVersions, ", "))
	}
	if s, ok := root.str("source"); ok {
		t.Source = s
	}
	t.Artifacts = readArtifacts(root)
}

func readArtifacts(root *table) []Artifact {
	elems, p, ok := root.array("artifacts", `artifacts = ["/app/output.json"]`)
	if !ok {
		return nil
	}
	var out []Artifact
	for i, e := range elems {
		ep := p.Elem(i)
		switch a := e.(type) {
		case string:
			out = append(out, Artifact{Source: a})
		case map[string]any:
			tb := root.d.table(ep, a)
			var art Artifact
			src, ok := tb.str("source")
			if !ok && !tb.has("source") {
				root.d.fail(ep, `an artifact table needs a source: write {source = "/app/output.json"}`)
			}
			art.Source = src
			art.Destination, _ = tb.str("destination")
			art.Exclude, _ = tb.strings("exclude", `["*.tmp"]`)
			art.Service, _ = tb.str("service")
			refuseSidecar(tb, art.Service, "an artifact")
			if strings.TrimSuffix(art.Destination, "/") == "manifest.json" {
				root.d.fail(ep.Child("destination"), `"manifest.json" is reserved for the list of what was collected: choose another destination`)
			}
			if art.Source != "" && slices.Contains(strings.Split(art.Source, "/"), "..") {
				root.d.fail(ep.Child("source"), "must not contain '..': write the path inside the environment")
			}
			if art.Destination != "" && (path.IsAbs(art.Destination) || slices.Contains(strings.Split(art.Destination, "/"), "..")) {
				root.d.fail(ep.Child("destination"), "must be a relative path without '..': write a path under the trial's artifacts directory")
			}
			tb.done()
			out = append(out, art)
		default:
			root.d.fail(ep, `each artifact is a path or a table, not %s: write "/app/output.json" or {source = "/app/output.json"}`, tomlType(e))
		}
	}
	return out
}

func readInfo(tb *table) Info {
	var in Info
	in.Name, _ = tb.str("name")
	if v, ok := tb.str("version"); ok {
		if v == "" {
			tb.d.fail(tb.at.Child("version"), `the task package's version cannot be empty: write version = "1.0.0", or remove it`)
		}
		in.Version = v
	}
	in.Description, _ = tb.str("description")
	in.Keywords, _ = tb.strings("keywords", `["python", "debugging"]`)
	elems, p, ok := tb.array("authors", `authors = [{name = "Jane Doe", email = "jane@example.com"}]`)
	if !ok {
		return in
	}
	for i, e := range elems {
		switch a := e.(type) {
		case string:
			in.Authors = append(in.Authors, Author{Name: a})
		case map[string]any:
			at := tb.d.table(p.Elem(i), a)
			var au Author
			au.Name, _ = at.str("name")
			au.Email, _ = at.str("email")
			at.done()
			in.Authors = append(in.Authors, au)
		default:
			tb.d.fail(p.Elem(i), `each author is a table, not %s: write {name = "Jane Doe", email = "jane@example.com"}`, tomlType(e))
		}
	}
	return in
}

// readUser reads a phase's user, which Harbor takes as a name or a uid.
func readUser(tb *table) string {
	v, p, ok := tb.take("user")
	if !ok {
		return ""
	}
	switch u := v.(type) {
	case string:
		if strings.TrimSpace(u) == "" || strings.ContainsAny(u, " \t\n\x00") {
			tb.d.fail(p, `%q is not a user: write a name or uid, optionally with a group: user = "1000:1000"`, u)
			return ""
		}
		return u
	case int64:
		if u < 0 || u > math.MaxUint32-1 {
			tb.d.fail(p, "%d is not a uid: write a uid between 0 and 4294967294, or a name", u)
			return ""
		}
		return strconv.FormatInt(u, 10)
	}
	tb.wrongType(p, v, "a user name or uid", `user = "1000:1000"`)
	return ""
}

func (t *Task) readEnv(tb *table, key string) Env {
	e, pos := tb.env("env")
	if pos != nil {
		t.envPos[key] = pos
	}
	return e
}

func (t *Task) readVerifier(v *table) {
	if dur, ok := v.seconds("timeout_sec", false, "600"); ok {
		t.Verifier.Timeout = dur
	}
	t.Verifier.User = readUser(v)
	t.Verifier.Env = t.readEnv(v, "verifier.env")
	if mode, ok := v.str("environment_mode"); ok {
		switch mode {
		case "shared":
		case "separate":
			v.d.unsupported(v.at.Child("environment_mode"), "a separate verifier environment",
				"sandboxd grades inside the agent's sandbox, as Harbor's shared mode does; remove environment_mode or write \"shared\"")
		default:
			v.d.fail(v.at.Child("environment_mode"), `%q is not a verifier environment mode: write "shared"`, mode)
		}
	}
	t.Verifier.Collect = readCollect(v)
	if v.has("environment") {
		_, p, _ := v.take("environment")
		v.d.unsupported(p, "a separate verifier environment",
			"[verifier.environment] asks for a second container; sandboxd grades inside the agent's sandbox. Remove the section")
	}
}

var tpuName = lazyRegexp(`(?i)tpu|trillium|ironwood|^v[2-7](e|p|lite|litepod)?([-_ ]|$)`)

func (t *Task) readEnvironment(env *table) {
	e := &t.Environment
	e.BuildTimeout = DefaultBuildTimeout
	e.OS = "linux"
	e.NetworkMode = NetworkPublic
	if env == nil {
		return
	}
	d := env.d
	at := env.at.Child

	if dur, ok := env.seconds("build_timeout_sec", false, "600"); ok {
		e.BuildTimeout = dur
	}
	e.DockerImage, _ = env.str("docker_image")
	if osName, ok := env.str("os"); ok {
		switch strings.ToLower(osName) {
		case "linux":
		case "windows":
			d.unsupported(at("os"), "Windows containers",
				"the sandbox is built with Linux namespaces (bubblewrap); run this task with Harbor's Docker environment on a Windows host")
		default:
			d.fail(at("os"), `%q is not an operating system Harbor knows: write os = "linux"`, osName)
		}
	}
	if wd, ok := env.str("workdir"); ok {
		if !path.IsAbs(wd) {
			d.fail(at("workdir"), `%q is not an absolute path: write workdir = "/app"`, wd)
		} else {
			e.Workdir = path.Clean(wd)
		}
	}
	if c, ok := env.number("cpus", "2"); ok {
		if c <= 0 {
			d.fail(at("cpus"), "must be more than 0, not %v: write cpus = 1", c)
		} else {
			e.CPUs = c
		}
	}
	e.MemoryMB = readSize(env, "memory_mb", "memory", "2048", `"2G"`)
	e.StorageMB = readSize(env, "storage_mb", "storage", "10240", `"10G"`)
	if g, ok := env.integer("gpus", "1"); ok {
		if g < 0 {
			d.fail(at("gpus"), "must be 0 or more, not %d: write gpus = 0", g)
		} else {
			e.GPUs = g
		}
	}
	if types, ok := env.strings("gpu_types", `["H100", "A100"]`); ok {
		for _, ty := range types {
			if tpuName().MatchString(ty) {
				d.unsupported(at("gpu_types"), "TPUs",
					fmt.Sprintf("%q names a TPU; sandboxd passes only GPU device nodes through. Remove it from gpu_types", ty))
			}
		}
		e.GPUTypes = types
	}
	for _, k := range []string{"tpu", "tpus"} {
		if env.has(k) {
			_, p, _ := env.take(k)
			d.unsupported(p, "TPUs", "sandboxd passes only GPU device nodes through; remove ["+p.String()+"] or run the task with Harbor's GKE environment")
		}
	}
	if v, p, ok := env.take("mcp_servers"); ok {
		if l, isList := v.([]any); !isList || len(l) > 0 {
			d.unsupported(p, "MCP servers",
				"Harbor hands [[environment.mcp_servers]] to the agent it installs; sandboxd installs no agent to configure. Configure the agent's MCP servers in the harness that runs it, and remove the section")
		}
	}
	if v, p, ok := env.take("skills_dir"); ok {
		if s, isStr := v.(string); !isStr || s != "" {
			d.unsupported(p, "agent skills",
				"Harbor copies skills_dir into the skills directory of the agent it installs; sandboxd installs no agent. Give the agent its skills in the harness that runs it, and remove skills_dir")
		}
	}
	e.Env = t.readEnv(env, "environment.env")
	if hc, ok := env.sub("healthcheck"); ok {
		e.Healthcheck = readHealthcheck(hc)
		hc.done()
	}

	pol := readPolicy(env)
	if allow, ok := env.boolean("allow_internet"); ok {
		legacy := NetworkNone
		if allow {
			legacy = NetworkPublic
		}
		switch {
		case !pol.set():
			pol.mode = legacy
		case !allow && pol.mode != NetworkNone:
			d.fail(at("allow_internet"), `allow_internet = false contradicts network_mode = %q: remove allow_internet (it is the legacy spelling of network_mode)`, pol.mode)
		}
	}
	if pol.set() {
		e.NetworkMode = pol.mode
		e.AllowedHosts = pol.hosts
	}
	env.done()
}

// readSize reads memory_mb (an integer) or its legacy spelling memory = "2G".
func readSize(env *table, mbKey, legacyKey, mbExample, legacyExample string) int64 {
	d := env.d
	var mb int64
	if n, ok := env.integer(mbKey, mbExample); ok {
		if n <= 0 {
			d.fail(env.at.Child(mbKey), "must be more than 0, not %d: write %s = %s", n, mbKey, mbExample)
		} else {
			mb = n
		}
	}
	s, ok := env.str(legacyKey)
	if !ok {
		return mb
	}
	lp := env.at.Child(legacyKey)
	legacy, err := parseSize(s)
	if err != nil {
		d.fail(lp, "%q is not a size: %v; write %s = %s or %s = %s", s, err, legacyKey, legacyExample, mbKey, mbExample)
		return mb
	}
	if mb != 0 && mb != legacy {
		d.fail(lp, "%s = %q (%d MB) contradicts %s = %d: keep only %s", legacyKey, s, legacy, mbKey, mb, mbKey)
		return mb
	}
	return legacy
}

// parseSize converts Harbor's legacy sizes ("2G", "512M", "1.5g", "4096K") to
// megabytes the way Harbor does: G × 1024, M × 1, K ÷ 1024, truncated.
func parseSize(s string) (int64, error) {
	v := strings.ToUpper(strings.TrimSpace(s))
	if v == "" {
		return 0, fmt.Errorf("it is empty")
	}
	unit := v[len(v)-1]
	scale := map[byte]float64{'G': 1024, 'M': 1, 'K': 1.0 / 1024}[unit]
	if scale == 0 {
		return 0, fmt.Errorf("it needs a unit G, M or K")
	}
	num := strings.TrimSpace(v[:len(v)-1])
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || strings.ContainsAny(num, "XPN_") { // no hex, NaN or Inf spellings
		return 0, fmt.Errorf("%q is not a number", num)
	}
	mb := f * scale
	if math.IsNaN(mb) || math.IsInf(mb, 0) || mb >= 1<<53 {
		return 0, fmt.Errorf("it is too large")
	}
	if mb < 1 {
		return 0, fmt.Errorf("it is less than 1 MB")
	}
	return int64(mb), nil
}

// Harbor's healthcheck defaults.
const (
	defaultHCInterval      = 5 * time.Second
	defaultHCTimeout       = 30 * time.Second
	defaultHCStartInterval = 5 * time.Second
)

func readHealthcheck(hc *table) *Healthcheck {
	h := &Healthcheck{
		Interval:      defaultHCInterval,
		Timeout:       defaultHCTimeout,
		StartInterval: defaultHCStartInterval,
		Retries:       3,
	}
	if cmd, ok := hc.str("command"); ok && strings.TrimSpace(cmd) != "" {
		h.Command = cmd
	} else if !hc.has("command") || ok {
		hc.d.fail(hc.at.Child("command"), `a healthcheck needs a command: write command = "curl -fsS localhost:8080/health"`)
	}
	if v, ok := hc.seconds("interval_sec", false, "5"); ok {
		h.Interval = v
	}
	if v, ok := hc.seconds("timeout_sec", false, "30"); ok {
		h.Timeout = v
	}
	if v, ok := hc.seconds("start_period_sec", true, "0"); ok {
		h.StartPeriod = v
	}
	if v, ok := hc.seconds("start_interval_sec", false, "5"); ok {
		h.StartInterval = v
	}
	if n, ok := hc.integer("retries", "3"); ok {
		if n < 1 {
			hc.d.fail(hc.at.Child("retries"), "must be 1 or more, not %d: write retries = 3", n)
		} else {
			h.Retries = n
		}
	}
	return h
}

// readCollect reads [[verifier.collect]]: each hook a command, with Harbor's
// defaults.
func readCollect(v *table) []CollectHook {
	hooks, ok := v.tables("collect")
	if !ok {
		return nil
	}
	var out []CollectHook
	for _, tb := range hooks {
		h := CollectHook{Service: mainService, Timeout: DefaultCollectTimeout}
		if cmd, ok := tb.str("command"); ok && strings.TrimSpace(cmd) != "" {
			h.Command = cmd
		} else if !tb.has("command") || ok {
			tb.d.fail(tb.at.Child("command"), `a collect hook needs a command: write command = "pg_dump app > /app/dump.sql"`)
		}
		if s, ok := tb.str("service"); ok {
			h.Service = s
			refuseSidecar(tb, s, "a collect hook")
		}
		if d, ok := tb.seconds("timeout_sec", false, "60"); ok {
			h.Timeout = d
		}
		h.User = readUser(tb)
		tb.done()
		out = append(out, h)
	}
	return out
}

// mainService is the compose service of the agent's own container.
const mainService = "main"

// refuseSidecar refuses a service other than main: sandboxd serves the main
// container, and a sidecar's files and processes are out of its reach.
func refuseSidecar(tb *table, service, what string) {
	if service == "" || service == mainService {
		return
	}
	tb.d.unsupported(tb.at.Child("service"), "artifacts and collect hooks of a sidecar",
		fmt.Sprintf("%s in service %q runs outside the container sandboxd serves; collect it from the main service (write service = \"main\" or leave it out), or run the task with Harbor's compose environment", what, service))
}
