// Package tomlpos reads a TOML document into plain values and keeps the line
// of every key, so that a schema reader can say on which line a wrong value
// is. The values come from go-toml's decoder, which enforces TOML's rules
// (duplicate keys, redefined tables); the lines come from walking go-toml's
// syntax tree, whose every key carries its byte range, so no line is guessed.
package tomlpos

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Doc is one parsed TOML document.
type Doc struct {
	values map[string]any
	lines  map[string]int      // Path.String() → the line that defines it
	order  map[string][]string // Path.String() of a table → its keys as written
}

// SyntaxError is a document that is not valid TOML, with where the mistake is.
type SyntaxError struct {
	Line int    // 1-based; 1 when the decoder knows no better
	Key  string // the key being read, as Path.String() writes it; "" when unknown
	Msg  string // the decoder's own words
	Err  error  // the decoder's error
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func (e *SyntaxError) Unwrap() error { return e.Err }

// Parse decodes data. A document that is not TOML comes back as a *SyntaxError.
func Parse(data []byte) (*Doc, error) {
	d := &Doc{lines: map[string]int{}, order: map[string][]string{}}
	if err := toml.Unmarshal(data, &d.values); err != nil {
		return nil, syntaxError(data, err)
	}
	if d.values == nil {
		d.values = map[string]any{}
	}
	if err := newWalker(d, data).walk(); err != nil {
		// The decoder took the document, so its parser cannot refuse it;
		// if it ever does, the document is still not one to trust.
		return nil, syntaxError(data, err)
	}
	return d, nil
}

// Values returns the root table: strings, int64, float64, bool, []any,
// map[string]any, and go-toml's date and time types.
func (d *Doc) Values() map[string]any { return d.values }

// Line returns the line that defines p: a key's own line, the first [[header]]
// of an array of tables, an element's header or first line. A path the
// document does not spell out (a table implied by [a.b] or a.b = 1) takes the
// line where it first appears; an unknown path takes its nearest known
// ancestor's line, and 0 when there is none.
func (d *Doc) Line(p Path) int {
	for ; len(p) > 0; p = p.parent() {
		if l, ok := d.lines[p.String()]; ok {
			return l
		}
	}
	return 0
}

// Keys returns the keys of the table at p in the order the document wrote them.
func (d *Doc) Keys(p Path) []string { return d.order[p.String()] }

// walker records lines and key order from go-toml's syntax tree, one
// top-level expression at a time.
type walker struct {
	doc      *Doc
	src      []byte
	newlines []int          // offsets of every '\n', for line numbers
	current  Path           // the table the next key/value belongs to
	arrays   map[string]int // array of tables → elements seen so far
	lastEnd  int            // offset just past the last expression read
	lastKey  Path           // the key of the last expression read
	until    int            // when > 0, the line past which the walk stops
}

func newWalker(d *Doc, src []byte) *walker {
	w := &walker{doc: d, src: src, arrays: map[string]int{}}
	for i, c := range src {
		if c == '\n' {
			w.newlines = append(w.newlines, i)
		}
	}
	return w
}

// line is the 1-based line of a byte offset.
func (w *walker) line(offset uint32) int {
	return sort.SearchInts(w.newlines, int(offset)) + 1
}

func (w *walker) walk() error {
	var p unstable.Parser
	p.Reset(w.src)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind == unstable.Comment {
			continue
		}
		if it := e.Key(); w.until > 0 && it.Next() && w.line(it.Node().Raw.Offset) > w.until {
			return nil
		}
		switch e.Kind {
		case unstable.Table:
			w.current = w.header(e, false)
			w.lastKey = w.current
		case unstable.ArrayTable:
			w.current = w.header(e, true)
			w.lastKey = w.current
		case unstable.KeyValue:
			w.lastKey = w.keyValue(w.current, e)
			w.lastEnd = int(e.Raw.Offset + e.Raw.Length)
		}
	}
	return p.Error()
}

// header records a [table] or [[array]] header and returns the table the
// keys below it go to.
func (w *walker) header(e *unstable.Node, array bool) Path {
	var at Path
	var line int
	it := e.Key()
	for it.Next() {
		k := it.Node()
		line = w.line(k.Raw.Offset)
		w.lastEnd = int(k.Raw.Offset + k.Raw.Length)
		if array && it.IsLast() {
			// The array itself, not its newest element: this header adds one.
			w.record(at, string(k.Data), line)
			at = at.Child(string(k.Data))
			break
		}
		at = w.enter(at, string(k.Data), line)
	}
	if !array {
		return at
	}
	n := w.arrays[at.String()]
	w.arrays[at.String()] = n + 1
	at = at.Elem(n)
	w.doc.lines[at.String()] = line
	return at
}

// enter steps from the table at to its key name, recording the key where it
// first appears, and into the newest element when name is an array of tables.
func (w *walker) enter(at Path, name string, line int) Path {
	w.record(at, name, line)
	next := at.Child(name)
	if n, ok := w.arrays[next.String()]; ok {
		next = next.Elem(n - 1)
	}
	return next
}

func (w *walker) record(at Path, name string, line int) {
	key := at.Child(name).String()
	if _, ok := w.doc.lines[key]; ok {
		return
	}
	w.doc.lines[key] = line
	parent := at.String()
	w.doc.order[parent] = append(w.doc.order[parent], name)
}

// keyValue records a (possibly dotted) key = value in the table at and
// returns the key's path.
func (w *walker) keyValue(at Path, e *unstable.Node) Path {
	it := e.Key()
	var last Path
	for it.Next() {
		k := it.Node()
		name := string(k.Data)
		if it.IsLast() {
			w.record(at, name, w.line(k.Raw.Offset))
			last = at.Child(name)
			break
		}
		at = w.enter(at, name, w.line(k.Raw.Offset))
	}
	w.value(last, e.Value())
	return last
}

// value records the keys inside an inline table and the elements of an
// array. Arrays nested in arrays are not indexed: their elements take the
// outer element's line.
func (w *walker) value(at Path, v *unstable.Node) {
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				w.keyValue(at, kv)
			}
		}
	case unstable.Array:
		if at[len(at)-1].Index >= 0 {
			return
		}
		it := v.Children()
		for i := 0; it.Next(); {
			el := it.Node()
			if el.Kind == unstable.Comment {
				continue
			}
			ep := at.Elem(i)
			if l := w.firstLine(el); l > 0 {
				w.doc.lines[ep.String()] = l
			}
			w.value(ep, el)
			i++
		}
	}
}

// firstLine is the line a value starts on; an array's node has no range of
// its own, so it takes that of its first element that has one.
func (w *walker) firstLine(v *unstable.Node) int {
	if v.Kind != unstable.Array {
		return w.line(v.Raw.Offset)
	}
	it := v.Children()
	for it.Next() {
		if l := w.firstLine(it.Node()); l > 0 {
			return l
		}
	}
	return 0
}

// syntaxError turns a decoder error into a *SyntaxError on the line of the
// mistake, with the key of the expression it refused.
func syntaxError(src []byte, err error) error {
	se := &SyntaxError{Line: 1, Msg: strings.TrimPrefix(err.Error(), "toml: "), Err: err}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		if row, _ := de.Position(); row > 0 {
			se.Line = row
		}
	}
	se.Key = keyAt(src, se.Line)
	return se
}

// keyAt names the key of the expression on line: where the parser takes the
// document (the decoder refused a duplicate key, a redefined table, a value),
// the last expression that starts by that line; where it does not, the key of
// the expression it stopped at, read again on its own with a value that
// cannot fail, else the table that expression is in.
func keyAt(src []byte, line int) string {
	w := newWalker(&Doc{lines: map[string]int{}, order: map[string][]string{}}, src)
	w.until = line
	if w.walk() == nil {
		return w.lastKey.String()
	}
	if k, ok := w.nextKey(); ok {
		return k.String()
	}
	return w.current.String()
}

// nextKey reads the key of the key/value that starts after the last
// expression the walk took.
func (w *walker) nextKey() (Path, bool) {
	rest := string(w.src[w.lastEnd:])
	if w.lastEnd > 0 {
		// The last expression's line is over; the next starts on a line after it.
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			return nil, false
		}
		rest = rest[i+1:]
	}
	for {
		rest = strings.TrimLeft(rest, " \t\r\n")
		if !strings.HasPrefix(rest, "#") {
			break
		}
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			return nil, false
		}
		rest = rest[i+1:]
	}
	line, _, _ := strings.Cut(rest, "\n")
	if strings.HasPrefix(line, "[") {
		return nil, false
	}
	for i := range len(line) {
		if line[i] != '=' {
			continue
		}
		var p unstable.Parser
		p.Reset([]byte(line[:i] + "= 0"))
		if !p.NextExpression() || p.Expression().Kind != unstable.KeyValue {
			continue
		}
		at := w.current
		it := p.Expression().Key()
		for it.Next() {
			at = at.Child(string(it.Node().Data))
		}
		return at, true
	}
	return nil, false
}

// Path names a key; an Index >= 0 marks an element of an array.
type Path []Seg

// Seg is one step of a Path.
type Seg struct {
	Name  string
	Index int // -1 for the key itself
}

// Child returns the path of key name inside the table at p.
func (p Path) Child(name string) Path {
	q := make(Path, len(p), len(p)+1)
	copy(q, p)
	return append(q, Seg{Name: name, Index: -1})
}

// Elem returns the path of element i of the array at p.
func (p Path) Elem(i int) Path {
	q := make(Path, len(p))
	copy(q, p)
	q[len(q)-1].Index = i
	return q
}

// parent drops the last step: an element's array, a key's table.
func (p Path) parent() Path {
	if last := p[len(p)-1]; last.Index >= 0 {
		return p.Elem(-1)
	}
	return p[:len(p)-1]
}

// String writes the key as a TOML dotted key, quoting pieces that need it,
// with [i] after array elements: environment.env.PATH, peers[1].port.
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		if i > 0 {
			b.WriteByte('.')
		}
		if bare(s.Name) {
			b.WriteString(s.Name)
		} else {
			fmt.Fprintf(&b, "%q", s.Name)
		}
		if s.Index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.Index)
		}
	}
	return b.String()
}

// bare reports whether name can be written unquoted, as TOML's bare keys.
func bare(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
