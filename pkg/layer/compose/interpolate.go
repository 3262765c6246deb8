package compose

import (
	"fmt"
	"strings"
)

// Compose interpolates every value of a compose file (never a key) before
// it reads it: $VAR and ${VAR}, ${VAR:-default} and ${VAR-default},
// ${VAR:?error} and ${VAR?error}, ${VAR:+replacement} and ${VAR+replacement},
// defaults that hold further references, and $$ for a literal $ (the Compose
// specification, "Interpolation"). A task's compose file means what Compose
// makes of it under Harbor, so adapt reads it the same way.

// Lookup finds a variable: its value, and whether it is set.
type Lookup func(name string) (string, bool)

// Interpolate expands s. It returns the names that were used unset with no
// default (Compose makes each the empty string and warns), and an error for
// a malformed reference or a ${VAR:?error} whose VAR has no value.
func Interpolate(s string, lookup Lookup) (string, []string, error) {
	var b strings.Builder
	var unset []string
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		switch n := s[i+1]; {
		case n == '$':
			b.WriteByte('$')
			i += 2
		case n == '{':
			end := closingBrace(s, i+2)
			if end < 0 {
				return "", nil, fmt.Errorf("invalid interpolation in %q: ${ is never closed", s)
			}
			v, u, err := expandBraced(s[i+2:end], lookup)
			if err != nil {
				return "", nil, err
			}
			b.WriteString(v)
			unset = append(unset, u...)
			i = end + 1
		case nameStart(n):
			j := i + 2
			for j < len(s) && nameChar(s[j]) {
				j++
			}
			name := s[i+1 : j]
			v, ok := lookup(name)
			if !ok {
				unset = append(unset, name)
			}
			b.WriteString(v)
			i = j
		default:
			// "$5", "$ ", "$-": not a reference, kept as written.
			b.WriteByte('$')
			i++
		}
	}
	return b.String(), unset, nil
}

// closingBrace finds the } that closes a ${ whose body starts at from,
// past nested ${…} references and $$ escapes; -1 when there is none.
func closingBrace(s string, from int) int {
	depth := 1
	for j := from; j < len(s); j++ {
		switch {
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '$':
			j++
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '{':
			depth++
			j++
		case s[j] == '}':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// expandBraced expands the body of one ${…}.
func expandBraced(body string, lookup Lookup) (string, []string, error) {
	j := 0
	for j < len(body) && (j == 0 && nameStart(body[j]) || j > 0 && nameChar(body[j])) {
		j++
	}
	name, rest := body[:j], body[j:]
	if name == "" {
		return "", nil, fmt.Errorf("invalid interpolation ${%s}: a reference starts with a letter or _", body)
	}
	v, ok := lookup(name)
	if rest == "" {
		if !ok {
			return "", []string{name}, nil
		}
		return v, nil, nil
	}
	colon := rest[0] == ':'
	if colon {
		rest = rest[1:]
	}
	if rest == "" || !strings.ContainsRune("-?+", rune(rest[0])) {
		return "", nil, fmt.Errorf("invalid interpolation ${%s}: after the name comes }, :-, -, :?, ?, :+ or +", body)
	}
	op, arg := rest[0], rest[1:]
	empty := !ok || (colon && v == "")
	switch op {
	case '-':
		if empty {
			return Interpolate(arg, lookup)
		}
		return v, nil, nil
	case '+':
		if empty {
			return "", nil, nil
		}
		return Interpolate(arg, lookup)
	default: // '?'
		if !empty {
			return v, nil, nil
		}
		msg, _, err := Interpolate(arg, lookup)
		if err != nil {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("required variable %s is missing a value: %s", name, msg)
	}
}

func nameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func nameChar(c byte) bool  { return nameStart(c) || c >= '0' && c <= '9' }
