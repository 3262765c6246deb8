package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// help is what a command's help says beyond its flags.
type help struct {
	name, synopsis string
	// env names the variable a flag can also be given as ("" for none).
	env func(flag string) string
}

// helps are the commands' help texts, by flag set.
var helps = map[*flag.FlagSet]help{}

// flags makes a command's FlagSet. The flag package prints nothing itself:
// parse prints help on stdout when it is asked for, and a usage error on
// stderr.
func flags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxd "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	helps[fs] = help{name: name, synopsis: synopsis}
	return fs
}

// parse parses a command's arguments. Help (-h, --help) goes to stdout and
// ends the command with 0; a usage error (an unknown flag, a bad value, a
// missing value) goes to stderr and ends it with exitUsage.
func parse(fs *flag.FlagSet, args []string) (ok bool, code int) {
	err := fs.Parse(unbundle(fs, args))
	switch {
	case err == nil:
		return true, 0
	case errors.Is(err, flag.ErrHelp):
		printHelp(os.Stdout, fs)
		return false, 0
	default:
		return false, usageError(fs, "%v", err)
	}
}

// noArgs is parse for a command that takes no arguments besides its flags.
func noArgs(fs *flag.FlagSet, args []string) (ok bool, code int) {
	if ok, code := parse(fs, args); !ok {
		return false, code
	}
	if fs.NArg() > 0 {
		return false, usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	return true, 0
}

// usageError reports a command used wrongly, with its synopsis, and
// returns exitUsage.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	h := helps[fs]
	fmt.Fprintf(os.Stderr, "sandboxd %s: %s\nusage: sandboxd %s %s\nRun sandboxd %s -h for its flags.\n",
		h.name, fmt.Sprintf(format, args...), h.name, h.synopsis, h.name)
	return exitUsage
}

// printHelp writes a command's synopsis, summary and flags, with GNU-style
// double dashes (the flag package takes both) and each flag's argument as
// its usage string names it in backquotes.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	h := helps[fs]
	fmt.Fprintf(w, "usage: sandboxd %s %s\n", h.name, h.synopsis)
	if s, ok := summaries[h.name]; ok {
		fmt.Fprintf(w, "\n%s.\n", upperFirst(s))
	}
	var lines []string
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if arg != "" {
			line += " " + arg
		}
		var notes []string
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && !isList(f) {
			notes = append(notes, "default "+quoteDefault(f))
		}
		if h.env != nil {
			if e := h.env(f.Name); e != "" {
				notes = append(notes, "env "+e)
			}
		}
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, "; ") + ")"
		}
		lines = append(lines, line+"\n        "+usage)
	})
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nflags:\n%s\n", strings.Join(lines, "\n"))
	}
}

func quoteDefault(f *flag.Flag) string {
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return strconv.Quote(f.DefValue)
		}
	}
	return f.DefValue
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func isList(f *flag.Flag) bool {
	_, ok := f.Value.(*listFlag)
	return ok
}

// unbundle splits bundled short boolean flags the way docker users type
// them: `-it` is `-i -t`, and `-itw DIR` is `-i -t -w DIR` (the last letter
// may take a value). Only a word whose every letter is a one-letter flag of
// fs is split; anything else is left for the flag package to judge. It
// stops where flag parsing stops: at "--" or the first argument.
func unbundle(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil || a[1] == '-' || hasValue || len(a) == 2 {
			out = append(out, a)
			if f != nil && !isBool(f) && !hasValue && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		split, takesValue := splitBundle(fs, a[1:])
		if split == nil {
			out = append(out, a)
			continue
		}
		out = append(out, split...)
		if takesValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// splitBundle is the letters of a bundle as flags, or nil when they are
// not one: every letter a one-letter flag, all boolean but maybe the last.
func splitBundle(fs *flag.FlagSet, letters string) (split []string, lastTakesValue bool) {
	for i, r := range letters {
		f := fs.Lookup(string(r))
		if f == nil || (!isBool(f) && i != len(letters)-1) {
			return nil, false
		}
		split = append(split, "-"+string(r))
		lastTakesValue = !isBool(f)
	}
	return split, lastTakesValue
}

// listFlag collects a repeatable flag; check, when set, refuses a bad
// value as the flag is parsed.
type listFlag struct {
	vals  []string
	check func(string) error
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.vals, ",")
}

func (l *listFlag) Set(v string) error {
	if l.check != nil {
		if err := l.check(v); err != nil {
			return err
		}
	}
	l.vals = append(l.vals, v)
	return nil
}

func (l *listFlag) Get() any { return append([]string{}, l.vals...) }

// choiceFlag is a string flag that takes one of a few words.
type choiceFlag struct {
	val     string
	choices []string
}

func (c *choiceFlag) String() string {
	if c == nil {
		return ""
	}
	return c.val
}

func (c *choiceFlag) Set(v string) error {
	if !slices.Contains(c.choices, v) {
		return fmt.Errorf("%q is not one of %s", v, strings.Join(c.choices, ", "))
	}
	c.val = v
	return nil
}

func (c *choiceFlag) Get() any { return c.val }
