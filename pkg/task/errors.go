package task

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrUnsupported marks a task that uses a Harbor feature sandboxd cannot provide.
var ErrUnsupported = errors.New("not supported by sandboxd")

// ErrInvalid marks a task whose files are missing or whose values are wrong.
var ErrInvalid = errors.New("invalid task")

// Pos locates a problem in a task file, printed as "task.toml:12: environment.memory".
type Pos struct {
	File string // the file as named to Load or Parse
	Line int    // 1-based; 0 when the problem has no single line
	Key  string // dotted key such as "environment.memory" or "peers[1].port"; "" when none applies
}

// String formats the position as FILE:LINE: KEY, leaving out the parts that are unknown.
func (p Pos) String() string {
	s := p.File
	if p.Line > 0 {
		s += ":" + strconv.Itoa(p.Line)
	}
	if p.Key != "" {
		if s != "" {
			s += ": "
		}
		s += p.Key
	}
	return s
}

// FieldError is a wrong, unreadable or missing part of a task, with what to write instead.
type FieldError struct {
	Pos
	Msg string // what is wrong and what to do about it
	Err error  // the underlying cause (a TOML decoder error, an fs error), if any
}

// Error reports the position and the message.
func (e *FieldError) Error() string { return e.Pos.String() + ": " + e.Msg }

// Unwrap lets errors.Is match ErrInvalid and the underlying cause.
func (e *FieldError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

// UnsupportedError names a task feature that sandboxd refuses, and why.
type UnsupportedError struct {
	Pos
	Feature string // e.g. "Windows containers", "multi-step tasks"
	Reason  string // why sandboxd cannot serve it, and what to do
}

// Error reports the position, the feature and the reason.
func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: sandboxd does not support %s: %s", e.Pos, e.Feature, e.Reason)
}

// Unwrap lets errors.Is match ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
