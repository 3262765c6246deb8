package wire

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Object builds a flat JSON object, as encoding/json would encode a struct
// of strings, string lists, ints and bools: a string's invalid UTF-8 is
// written as U+FFFD, as encoding/json writes it.
type Object struct{ b []byte }

func (o *Object) key(k string) {
	if len(o.b) == 0 {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ',')
	}
	o.b = appendString(o.b, k)
	o.b = append(o.b, ':')
}

// String adds k with the string v.
func (o *Object) String(k, v string) { o.key(k); o.b = appendString(o.b, v) }

// Int adds k with the number v.
func (o *Object) Int(k string, v int) { o.key(k); o.b = strconv.AppendInt(o.b, int64(v), 10) }

// Bool adds k with v.
func (o *Object) Bool(k string, v bool) { o.key(k); o.b = strconv.AppendBool(o.b, v) }

// Strings adds k with the list vs.
func (o *Object) Strings(k string, vs []string) {
	o.key(k)
	o.b = append(o.b, '[')
	for i, v := range vs {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = appendString(o.b, v)
	}
	o.b = append(o.b, ']')
}

// Bytes is the object's JSON.
func (o *Object) Bytes() []byte {
	if len(o.b) == 0 {
		return []byte("{}")
	}
	return append(o.b, '}')
}

const hex = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

func (r Resize) json() []byte {
	var o Object
	o.Int("cols", r.Cols)
	o.Int("rows", r.Rows)
	return o.Bytes()
}

func (e *Exit) decode(data []byte) error {
	return decodeObject(data, func(k string, v value) error {
		var err error
		switch k {
		case "code":
			e.Code, err = v.int()
		case "signal":
			e.Signal, err = v.string()
		case "timed_out":
			e.TimedOut, err = v.bool()
		}
		return err
	})
}

func (f *Failure) decode(data []byte) error {
	return decodeObject(data, func(k string, v value) error {
		var err error
		switch k {
		case "code":
			f.Code, err = v.int()
		case "message":
			f.Message, err = v.string()
		}
		return err
	})
}

// value is one scalar of a flat object: its kind ('"' string, '0' number,
// 't' or 'f' bool, 'n' null, '{' or '[' anything nested) and its text,
// unquoted for a string.
type value struct {
	kind byte
	text string
}

var errType = errors.New("a value of the wrong type")

// A null leaves the field as it was, as encoding/json leaves it.
func (v value) int() (int, error) {
	if v.kind != '0' {
		return 0, errType
	}
	return strconv.Atoi(v.text)
}

func (v value) string() (string, error) {
	if v.kind != '"' {
		return "", errType
	}
	return v.text, nil
}

func (v value) bool() (bool, error) {
	if v.kind != 't' && v.kind != 'f' {
		return false, errType
	}
	return v.kind == 't', nil
}

// decodeObject reads one JSON object and calls field for each of its
// members but those that are null (a nested value is passed as its kind
// alone: a field that takes a scalar refuses it, and a member no field
// names is skipped). Anything but whitespace after the object is an error.
func decodeObject(data []byte, field func(k string, v value) error) error {
	d := decoder{data: data}
	d.space()
	if !d.eat('{') {
		return d.fail("an object")
	}
	d.space()
	if !d.eat('}') {
		for {
			d.space()
			k, err := d.string()
			if err != nil {
				return err
			}
			d.space()
			if !d.eat(':') {
				return d.fail("':'")
			}
			d.space()
			v, err := d.value()
			if err != nil {
				return err
			}
			if v.kind != 'n' {
				if err := field(k, v); err != nil {
					return errors.New("member " + strconv.Quote(k) + ": " + err.Error())
				}
			}
			d.space()
			if d.eat('}') {
				break
			}
			if !d.eat(',') {
				return d.fail("',' or '}'")
			}
		}
	}
	d.space()
	if d.i != len(d.data) {
		return d.fail("the end")
	}
	return nil
}

type decoder struct {
	data []byte
	i    int
}

func (d *decoder) fail(want string) error {
	return errors.New("invalid JSON at byte " + strconv.Itoa(d.i) + ": want " + want)
}

func (d *decoder) space() {
	for d.i < len(d.data) && (d.data[d.i] == ' ' || d.data[d.i] == '\t' || d.data[d.i] == '\n' || d.data[d.i] == '\r') {
		d.i++
	}
}

func (d *decoder) eat(c byte) bool {
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *decoder) literal(word string) bool {
	if len(d.data)-d.i >= len(word) && string(d.data[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return true
	}
	return false
}

func (d *decoder) value() (value, error) {
	if d.i >= len(d.data) {
		return value{}, d.fail("a value")
	}
	switch c := d.data[d.i]; {
	case c == '"':
		s, err := d.string()
		return value{'"', s}, err
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case d.literal("true"):
		return value{'t', ""}, nil
	case d.literal("false"):
		return value{'f', ""}, nil
	case d.literal("null"):
		return value{'n', ""}, nil
	case c == '{' || c == '[':
		return value{c, ""}, d.skipNested()
	}
	return value{}, d.fail("a value")
}

// number reads a number as JSON writes it.
func (d *decoder) number() (value, error) {
	start := d.i
	d.eat('-')
	digits := func() bool {
		n := d.i
		for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
			d.i++
		}
		return d.i > n
	}
	if d.eat('0') {
		// no leading zeros
	} else if !digits() {
		return value{}, d.fail("a digit")
	}
	if d.eat('.') && !digits() {
		return value{}, d.fail("a digit")
	}
	if d.eat('e') || d.eat('E') {
		if !d.eat('+') {
			d.eat('-')
		}
		if !digits() {
			return value{}, d.fail("a digit")
		}
	}
	return value{'0', string(d.data[start:d.i])}, nil
}

// skipNested passes over an object or an array, whatever it holds.
func (d *decoder) skipNested() error {
	open := d.data[d.i]
	d.i++
	d.space()
	closing := byte('}')
	if open == '[' {
		closing = ']'
	}
	if d.eat(closing) {
		return nil
	}
	for {
		d.space()
		if open == '{' {
			if _, err := d.string(); err != nil {
				return err
			}
			d.space()
			if !d.eat(':') {
				return d.fail("':'")
			}
			d.space()
		}
		if _, err := d.value(); err != nil {
			return err
		}
		d.space()
		if d.eat(closing) {
			return nil
		}
		if !d.eat(',') {
			return d.fail("',' or " + strconv.QuoteRune(rune(closing)))
		}
	}
}

// string reads a JSON string. As encoding/json does, it decodes invalid
// UTF-8 and a lone surrogate as U+FFFD.
func (d *decoder) string() (string, error) {
	if !d.eat('"') {
		return "", d.fail("a string")
	}
	var out []byte
	for {
		if d.i >= len(d.data) {
			return "", d.fail("'\"'")
		}
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return string(out), nil
		case c < 0x20:
			return "", d.fail("no control character in a string")
		case c == '\\':
			d.i++
			if d.i >= len(d.data) {
				return "", d.fail("an escape")
			}
			e := d.data[d.i]
			d.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.fail("four hex digits")
				}
				if utf16.IsSurrogate(r) {
					// A pair is one rune; a lone surrogate is U+FFFD, and
					// the escape after it is read on its own.
					save, next := d.i, rune(-1)
					if d.literal(`\u`) {
						if r2, ok := d.hex4(); ok {
							next = r2
						}
					}
					if r = utf16.DecodeRune(r, next); r == utf8.RuneError {
						d.i = save
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", d.fail("an escape")
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.data[d.i:])
			d.i += size
			out = utf8.AppendRune(out, r)
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func (d *decoder) hex4() (rune, bool) {
	if len(d.data)-d.i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.data[d.i:d.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(n), true
}
