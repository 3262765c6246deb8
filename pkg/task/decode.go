package task

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
)

// This file is the generic half of reading a TOML file into the model: a
// document that knows where every key is, and a table reader that takes the
// keys a schema knows, reports type errors with file, line and key, and
// reports every key it did not take as an "unknown key" warning. The schema
// halves (task.toml, sandboxd.toml) only say which keys exist.

// doc is one parsed TOML file plus every problem found while reading it.
type doc struct {
	file     string
	src      string
	md       toml.MetaData
	prims    map[string]toml.Primitive
	raw      map[string]any
	errs     []error
	warnings []warning
	headers  map[string][]int // "peers" → line of each [[peers]] header, filled on demand
	levels   map[string]map[string]toml.Primitive

	moreErrs, moreWarnings int    // problems past the bounds, counted only
	firstMore              string // key of the first error past the bound
}

type warning struct {
	line int
	text string
}

// newDoc parses data; a syntax error comes back as a *FieldError with its line.
func newDoc(file string, data []byte) (*doc, error) {
	d := &doc{file: file, src: string(data)}
	md, err := toml.Decode(d.src, &d.prims)
	if err != nil {
		return nil, syntaxError(file, d.src, err)
	}
	d.md = md
	d.raw = make(map[string]any, len(d.prims))
	for k, p := range d.prims {
		var v any
		if err := d.md.PrimitiveDecode(p, &v); err != nil {
			return nil, syntaxError(file, d.src, err)
		}
		d.raw[k] = v
	}
	return d, nil
}

func syntaxError(file, src string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line := pe.Position.Line
		if line == 0 {
			line = pe.Line
		}
		// An error found at a line's end is counted on the next line by the
		// lexer; the mistake is on the line the newline ends.
		if st := pe.Position.Start; st > 0 && st < len(src) && src[st] == '\n' && strings.Count(src[:st], "\n")+1 == line-1 {
			line--
		}
		key := pe.LastKey
		if line == 0 && key == "" {
			line = 1 // the library knows no better; the file is still named
		}
		msg := pe.Message
		if msg == "" {
			msg = err.Error()
		}
		return &FieldError{Pos: Pos{File: file, Line: line, Key: key},
			Msg: "invalid TOML: " + msg + " (fix the syntax; see https://toml.io)", Err: err}
	}
	return &FieldError{Pos: Pos{File: file, Line: 1}, Msg: "invalid TOML: " + err.Error(), Err: err}
}

// err is nil, the one problem found, or every problem joined in file order.
func (d *doc) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool { return errLine(d.errs[i]) < errLine(d.errs[j]) })
	if d.moreErrs > 0 {
		d.errs = append(d.errs, &FieldError{Pos: Pos{File: d.file, Key: d.firstMore},
			Msg: fmt.Sprintf("and %d more problems not shown: fix the ones above first", d.moreErrs)})
	}
	if len(d.errs) == 1 {
		return d.errs[0]
	}
	return errors.Join(d.errs...)
}

func errLine(err error) int {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Line
	}
	var ue *UnsupportedError
	if errors.As(err, &ue) {
		return ue.Line
	}
	return 0
}

// maxWarnings bounds the warning list so that a file of garbage keys cannot
// flood logs; a last line says how many more there were.
const maxWarnings = 100

// warningTexts returns the warnings in file order.
func (d *doc) warningTexts() []string {
	if len(d.warnings) == 0 {
		return nil
	}
	sort.SliceStable(d.warnings, func(i, j int) bool { return d.warnings[i].line < d.warnings[j].line })
	out := make([]string, 0, len(d.warnings)+1)
	for _, w := range d.warnings {
		out = append(out, w.text)
	}
	if d.moreWarnings > 0 {
		out = append(out, fmt.Sprintf("%s: %d more warnings not shown", d.file, d.moreWarnings))
	}
	return out
}

func (d *doc) pos(p keyPath) Pos { return Pos{File: d.file, Line: d.line(p), Key: p.String()} }

// maxProblems bounds the errors and warnings that get a position: finding a
// line costs a pass over the file, and a file of ten thousand bad keys must
// not cost ten thousand passes. Past the bound problems are only counted.
const maxProblems = 100

func (d *doc) fail(p keyPath, format string, args ...any) {
	if d.full(p) {
		return
	}
	d.errs = append(d.errs, &FieldError{Pos: d.pos(p), Msg: fmt.Sprintf(format, args...)})
}

func (d *doc) unsupported(p keyPath, feature, reason string) {
	if d.full(p) {
		return
	}
	d.errs = append(d.errs, &UnsupportedError{Pos: d.pos(p), Feature: feature, Reason: reason})
}

func (d *doc) full(p keyPath) bool {
	if len(d.errs) < maxProblems {
		return false
	}
	if d.moreErrs == 0 {
		d.firstMore = p.String()
	}
	d.moreErrs++
	return true
}

func (d *doc) warn(p keyPath, format string, args ...any) {
	if len(d.warnings) >= maxWarnings {
		d.moreWarnings++
		return
	}
	line := d.line(p)
	pos := d.file
	if line > 0 {
		pos = fmt.Sprintf("%s:%d", d.file, line)
	}
	d.warnings = append(d.warnings, warning{line: line, text: pos + ": " + fmt.Sprintf(format, args...)})
}

// keyPath names a key; an index >= 0 marks an element of an array.
type keyPath []seg

type seg struct {
	name  string
	index int
}

func (p keyPath) child(name string) keyPath {
	q := make(keyPath, len(p), len(p)+1)
	copy(q, p)
	return append(q, seg{name: name, index: -1})
}

func (p keyPath) elem(i int) keyPath {
	q := make(keyPath, len(p))
	copy(q, p)
	q[len(q)-1].index = i
	return q
}

func (p keyPath) names() []string {
	out := make([]string, len(p))
	for i, s := range p {
		out[i] = s.name
	}
	return out
}

var bareKey = lazyRegexp(`^[A-Za-z0-9_-]+$`)

// lazyRegexp compiles expr on first use rather than at init: every start of
// this binary runs every package's init (the CLI of each `sandboxd exec`, the
// visitor and netns helpers), and most of them never reads a task.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// String writes the key as a TOML dotted key, quoting pieces that need it,
// with [i] after array elements: environment.env.PATH, peers[1].port.
func (p keyPath) String() string {
	var b strings.Builder
	for i, s := range p {
		if i > 0 {
			b.WriteByte('.')
		}
		if bareKey().MatchString(s.name) {
			b.WriteString(s.name)
		} else {
			fmt.Fprintf(&b, "%q", s.name)
		}
		if s.index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.index)
		}
	}
	return b.String()
}

// line finds the line that defines p. The TOML library records the position
// of every key it parsed but exposes it only through errors, so probe asks for
// it by failing a decode at that key. Keys the library has no position for
// (tables implied by dotted keys or by [a.b]) take their first descendant's
// line, else their nearest ancestor's.
func (d *doc) line(p keyPath) int {
	if len(p) == 0 {
		return 0
	}
	if last := p[len(p)-1]; last.index < 0 && d.md.Type(p.names()...) == "ArrayHash" {
		// A whole [[array]]: its first header, where the library keeps the last.
		if hdr := d.arrayHeaders(p.names()); len(hdr) > 0 {
			return hdr[0]
		}
	}
	if l := d.probe(p); l > 0 {
		return l
	}
	if l := d.descendantLine(p); l > 0 {
		return l
	}
	for i := len(p) - 1; i > 0; i-- {
		if l := d.probe(p[:i]); l > 0 {
			return l
		}
	}
	return 0
}

type lineProbe struct{}

var errLineProbe = errors.New("line probe")

func (lineProbe) UnmarshalTOML(any) error { return errLineProbe }

func (d *doc) probe(p keyPath) int {
	level := d.prims
	for i, s := range p {
		prim, ok := level[s.name]
		if !ok {
			return 0
		}
		if s.index >= 0 {
			var elems []toml.Primitive
			if d.md.PrimitiveDecode(prim, &elems) != nil || s.index >= len(elems) {
				return 0
			}
			prim = elems[s.index]
		}
		if i == len(p)-1 {
			return d.correctForArrayTables(p, d.primLine(prim))
		}
		if level = d.level(p[:i+1], prim); level == nil {
			return 0
		}
	}
	return 0
}

// level decodes the table at p into its keys' primitives, once: a line is
// looked up per problem, and decoding a large table per lookup is quadratic.
func (d *doc) level(p keyPath, prim toml.Primitive) map[string]toml.Primitive {
	key := p.String()
	if m, ok := d.levels[key]; ok {
		return m
	}
	m := map[string]toml.Primitive{}
	if d.md.PrimitiveDecode(prim, &m) != nil {
		// An array addressed without an index: look in its first element.
		var elems []map[string]toml.Primitive
		if d.md.PrimitiveDecode(prim, &elems) != nil || len(elems) == 0 {
			m = nil
		} else {
			m = elems[0]
		}
	}
	if d.levels == nil {
		d.levels = map[string]map[string]toml.Primitive{}
	}
	d.levels[key] = m
	return m
}

func (d *doc) primLine(prim toml.Primitive) int {
	err := d.md.PrimitiveDecode(prim, lineProbe{})
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return pe.Position.Line
	}
	return 0
}

// correctForArrayTables fixes lines inside [[array]] elements: the library keeps
// one position per dotted key, that of the last element that set it. When the
// found line is outside element i's [[header]] section, element i's header is
// the better answer.
func (d *doc) correctForArrayTables(p keyPath, line int) int {
	at := -1
	for i, s := range p {
		if s.index >= 0 {
			at = i
		}
	}
	if at < 0 {
		return line
	}
	hdr := d.arrayHeaders(p[:at+1].names())
	i := p[at].index
	if i >= len(hdr) {
		return line
	}
	end := math.MaxInt
	if i+1 < len(hdr) {
		end = hdr[i+1]
	}
	if line >= hdr[i] && line < end {
		return line
	}
	// A key written directly in the element: find its line in the section.
	if at == len(p)-2 {
		key := regexp.MustCompile(`^\s*["']?` + regexp.QuoteMeta(p[at+1].name) + `["']?\s*[=.]`)
		lines := strings.Split(d.src, "\n")
		for n := hdr[i]; n < end && n <= len(lines); n++ {
			if key.MatchString(lines[n-1]) {
				return n
			}
		}
	}
	return hdr[i]
}

// arrayHeaders finds the lines of the [[name]] headers of one array of tables
// with a line scan that skips multi-line strings. It is only used to correct
// positions, so a rare miss makes a line less precise, never wrong in kind.
func (d *doc) arrayHeaders(names []string) []int {
	want := strings.Join(names, ".")
	if d.headers == nil {
		d.headers = map[string][]int{}
	}
	if h, ok := d.headers[want]; ok {
		return h
	}
	var out []int
	inMulti := ""
	for n, ln := range strings.Split(d.src, "\n") {
		if inMulti != "" {
			if strings.Count(ln, inMulti)%2 == 1 {
				inMulti = ""
			}
			continue
		}
		for _, q := range []string{`"""`, `'''`} {
			if strings.Count(ln, q)%2 == 1 {
				inMulti = q
			}
		}
		s := strings.TrimSpace(ln)
		if !strings.HasPrefix(s, "[[") {
			continue
		}
		end := strings.Index(s, "]]")
		if end < 0 {
			continue
		}
		name := strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '"' || r == '\'' {
				return -1
			}
			return r
		}, s[2:end])
		if name == want {
			out = append(out, n+1)
		}
	}
	d.headers[want] = out
	return out
}

func (d *doc) descendantLine(p keyPath) int {
	names := p.names()
	for _, k := range d.md.Keys() {
		if len(k) <= len(names) || !hasPrefix(k, names) {
			continue
		}
		q := make(keyPath, len(k))
		for i, n := range k {
			q[i] = seg{name: n, index: -1}
			if i < len(p) {
				q[i].index = p[i].index
			}
		}
		if l := d.probe(q); l > 0 {
			return l
		}
	}
	return 0
}

func hasPrefix(k toml.Key, names []string) bool {
	for i, n := range names {
		if k[i] != n {
			return false
		}
	}
	return true
}

// order returns the child keys of the table at p in the order the file wrote them.
func (d *doc) order(p keyPath) []string {
	names := p.names()
	seen := map[string]bool{}
	var out []string
	for _, k := range d.md.Keys() {
		if len(k) != len(names)+1 || !hasPrefix(k, names) || seen[k[len(names)]] {
			continue
		}
		seen[k[len(names)]] = true
		out = append(out, k[len(names)])
	}
	return out
}

// table reads the keys of one TOML table; every key not taken is reported as
// unknown by done.
type table struct {
	d    *doc
	at   keyPath
	m    map[string]any
	used map[string]bool
}

func (d *doc) root() *table {
	return &table{d: d, m: d.raw, used: map[string]bool{}}
}

// take returns the value of a key and marks it known.
func (t *table) take(name string) (any, keyPath, bool) {
	t.used[name] = true
	v, ok := t.m[name]
	return v, t.at.child(name), ok
}

// has reports whether the file set a key, without taking it.
func (t *table) has(name string) bool {
	_, ok := t.m[name]
	return ok
}

// done warns about every key of this table that the schema did not take, in
// file order.
func (t *table) done() {
	var unknown []string
	for name := range t.m {
		if !t.used[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return
	}
	sort.Strings(unknown)
	rank := map[string]int{}
	for i, name := range t.d.order(t.at) {
		rank[name] = i + 1
	}
	sort.SliceStable(unknown, func(i, j int) bool {
		ri, rj := rank[unknown[i]], rank[unknown[j]]
		return ri != 0 && (rj == 0 || ri < rj)
	})
	for _, name := range unknown {
		p := t.at.child(name)
		t.d.warn(p, "unknown key %q (ignored)", p.String())
	}
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case nil:
		return "empty"
	default:
		return "a date/time"
	}
}

func (t *table) wrongType(p keyPath, v any, want, example string) {
	t.d.fail(p, "must be %s, not %s: write %s", want, tomlType(v), example)
}

func (t *table) str(name string) (string, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(p, v, "a string", fmt.Sprintf(`%s = "..."`, name))
	}
	return s, ok
}

func (t *table) boolean(name string) (bool, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		t.wrongType(p, v, "true or false", fmt.Sprintf("%s = true", name))
	}
	return b, ok
}

// integer reads a whole number; a float with no fraction is accepted, as
// Harbor's pydantic models accept 4096.0 for an int.
func (t *table) integer(name, example string) (int64, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
		t.d.fail(p, "must be a whole number, not %v: write %s = %s", n, name, example)
		return 0, false
	}
	t.wrongType(p, v, "a whole number", fmt.Sprintf("%s = %s", name, example))
	return 0, false
}

// number reads an integer or a float that is finite.
func (t *table) number(name, example string) (float64, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return 0, false
	}
	var f float64
	switch n := v.(type) {
	case int64:
		f = float64(n)
	case float64:
		f = n
	default:
		t.wrongType(p, v, "a number", fmt.Sprintf("%s = %s", name, example))
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		t.d.fail(p, "must be a finite number, not %v: write %s = %s", f, name, example)
		return 0, false
	}
	return f, true
}

// maxSeconds keeps every duration representable as a time.Duration.
const maxSeconds = float64(math.MaxInt64/int64(time.Second)) - 1

// seconds reads a duration given in seconds (int or float). zeroOK admits 0.
func (t *table) seconds(name string, zeroOK bool, example string) (time.Duration, bool) {
	f, ok := t.number(name, example)
	if !ok {
		return 0, false
	}
	p := t.at.child(name)
	switch {
	case f < 0 || (f == 0 && !zeroOK):
		want := "positive"
		if zeroOK {
			want = "zero or more"
		}
		t.d.fail(p, "must be %s seconds, not %v: write %s = %s", want, f, name, example)
		return 0, false
	case f > maxSeconds:
		t.d.fail(p, "%v seconds is too long: write a number of seconds below %.0f", f, maxSeconds)
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// strings reads an array of strings.
func (t *table) strings(name, example string) ([]string, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return nil, false
	}
	arr, ok := v.([]any)
	if !ok {
		t.wrongType(p, v, "an array of strings", fmt.Sprintf("%s = %s", name, example))
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			t.d.fail(p, "element %d must be a string, not %s: write %s = %s", i, tomlType(e), name, example)
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// sub opens a sub-table.
func (t *table) sub(name string) (*table, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.wrongType(p, v, "a table", fmt.Sprintf("[%s] with its keys below it", p))
		return nil, false
	}
	return &table{d: t.d, at: p, m: m, used: map[string]bool{}}, true
}

// tables reads an array of tables ([[name]] or name = [{...}, ...]).
func (t *table) tables(name string) ([]*table, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return nil, false
	}
	var ms []map[string]any
	switch a := v.(type) {
	case []map[string]any:
		ms = a
	case []any:
		for i, e := range a {
			m, ok := e.(map[string]any)
			if !ok {
				t.d.fail(p.elem(i), "must be a table, not %s: write [[%s]] sections", tomlType(e), name)
				return nil, false
			}
			ms = append(ms, m)
		}
	default:
		t.wrongType(p, v, "an array of tables", fmt.Sprintf("[[%s]] sections", p))
		return nil, false
	}
	out := make([]*table, len(ms))
	for i, m := range ms {
		out[i] = &table{d: t.d, at: p.elem(i), m: m, used: map[string]bool{}}
	}
	return out, true
}

// env reads a table of environment variables in file order; values must be
// strings, as Harbor's dict[str, str] requires. The positions are those of the
// values that need a host variable, for ExpandEnv's errors.
func (t *table) env(name string) (Env, map[string]Pos) {
	sub, ok := t.sub(name)
	if !ok {
		return nil, nil
	}
	keys := t.d.order(sub.at)
	// Keys the metadata did not list (never expected) still count, sorted.
	listed := map[string]bool{}
	for _, k := range keys {
		listed[k] = true
	}
	var extra []string
	for k := range sub.m {
		if !listed[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	keys = append(keys, extra...)

	out := make(Env, 0, len(keys))
	var pos map[string]Pos
	for _, k := range keys {
		v, ok := sub.m[k]
		if !ok {
			continue
		}
		p := sub.at.child(k)
		s, ok := v.(string)
		if !ok {
			t.d.fail(p, "environment values must be strings, not %s: write %s = \"...\" (quote numbers and booleans)", tomlType(v), p[len(p)-1].name)
			continue
		}
		if k == "" || strings.ContainsAny(k, "=\x00") {
			t.d.fail(p, "%q is not a usable environment variable name: names cannot be empty or contain '=' or NUL", k)
			continue
		}
		if strings.ContainsRune(s, 0) {
			t.d.fail(p, "environment values cannot contain a NUL byte")
			continue
		}
		if _, _, hasDef, ok := template(s); ok && !hasDef {
			if pos == nil {
				pos = map[string]Pos{}
			}
			pos[k] = t.d.pos(p)
		}
		out = append(out, EnvVar{Name: k, Value: s})
	}
	return out, pos
}
