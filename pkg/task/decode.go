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

	"github.com/sandboxd/sandboxd/internal/tomlpos"
)

// This file is the generic half of reading a TOML file into the model: a
// table reader that takes the keys a schema knows, reports type errors with
// file, line and key (internal/tomlpos knows every key's line), and reports
// every key it did not take as an "unknown key" warning. The schema halves
// (task.toml, sandboxd.toml) only say which keys exist.

// doc is one parsed TOML file plus every problem found while reading it.
type doc struct {
	file     string
	toml     *tomlpos.Doc
	errs     []error
	warnings []warning

	moreErrs, moreWarnings int    // problems past the bounds, counted only
	firstMore              string // key of the first error past the bound
}

type warning struct {
	line int
	text string
}

// keyPath names a key in the form tomlpos finds its line by.
type keyPath = tomlpos.Path

// newDoc parses data; a syntax error comes back as a *FieldError with its line.
func newDoc(file string, data []byte) (*doc, error) {
	t, err := tomlpos.Parse(data)
	if err != nil {
		var se *tomlpos.SyntaxError
		if errors.As(err, &se) {
			return nil, &FieldError{Pos: Pos{File: file, Line: se.Line, Key: se.Key},
				Msg: "invalid TOML: " + se.Msg + " (fix the syntax; see https://toml.io)", Err: se.Err}
		}
		return nil, &FieldError{Pos: Pos{File: file, Line: 1}, Msg: "invalid TOML: " + err.Error(), Err: err}
	}
	return &doc{file: file, toml: t}, nil
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

func (d *doc) pos(p keyPath) Pos { return Pos{File: d.file, Line: d.toml.Line(p), Key: p.String()} }

// maxProblems bounds the errors reported one by one: a file of ten thousand
// bad keys gets an answer a person can read, not ten thousand lines. Past the
// bound problems are only counted.
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
	line := d.toml.Line(p)
	pos := d.file
	if line > 0 {
		pos = fmt.Sprintf("%s:%d", d.file, line)
	}
	d.warnings = append(d.warnings, warning{line: line, text: pos + ": " + fmt.Sprintf(format, args...)})
}

// lazyRegexp compiles expr on first use rather than at init: every start of
// this binary runs every package's init (the CLI of each `sandboxd exec`, the
// visitor and netns helpers), and most of them never reads a task.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// table reads the keys of one TOML table; every key not taken is reported as
// unknown by done.
type table struct {
	d    *doc
	at   keyPath
	m    map[string]any
	used map[string]bool
}

func (d *doc) root() *table { return d.table(nil, d.toml.Values()) }

// table opens the table m, found at at.
func (d *doc) table(at keyPath, m map[string]any) *table {
	return &table{d: d, at: at, m: m, used: map[string]bool{}}
}

// take returns the value of a key and marks it known.
func (t *table) take(name string) (any, keyPath, bool) {
	t.used[name] = true
	v, ok := t.m[name]
	return v, t.at.Child(name), ok
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
	for i, name := range t.d.toml.Keys(t.at) {
		rank[name] = i + 1
	}
	sort.SliceStable(unknown, func(i, j int) bool {
		ri, rj := rank[unknown[i]], rank[unknown[j]]
		return ri != 0 && (rj == 0 || ri < rj)
	})
	for _, name := range unknown {
		p := t.at.Child(name)
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
	case []any:
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
	p := t.at.Child(name)
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

// array reads an array whose elements the caller tells apart (a path or a
// table, a name or a table).
func (t *table) array(name, example string) ([]any, keyPath, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return nil, p, false
	}
	a, ok := v.([]any)
	if !ok {
		t.wrongType(p, v, "an array", example)
		return nil, p, false
	}
	return a, p, true
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
	return t.d.table(p, m), true
}

// tables reads an array of tables ([[name]] or name = [{...}, ...]).
func (t *table) tables(name string) ([]*table, bool) {
	v, p, ok := t.take(name)
	if !ok {
		return nil, false
	}
	a, ok := v.([]any)
	if !ok {
		t.wrongType(p, v, "an array of tables", fmt.Sprintf("[[%s]] sections", p))
		return nil, false
	}
	out := make([]*table, len(a))
	for i, e := range a {
		m, ok := e.(map[string]any)
		if !ok {
			t.d.fail(p.Elem(i), "must be a table, not %s: write [[%s]] sections", tomlType(e), name)
			return nil, false
		}
		out[i] = t.d.table(p.Elem(i), m)
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
	keys := t.d.toml.Keys(sub.at)
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
		p := sub.at.Child(k)
		s, ok := v.(string)
		if !ok {
			t.d.fail(p, "environment values must be strings, not %s: write %s = \"...\" (quote numbers and booleans)", tomlType(v), p[len(p)-1].Name)
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
		if len(needsHost(s)) > 0 {
			if pos == nil {
				pos = map[string]Pos{}
			}
			pos[k] = t.d.pos(p)
		}
		out = append(out, EnvVar{Name: k, Value: s})
	}
	return out, pos
}
