package sftpd

import (
	"strings"
)

// SCP recognises an exec request's command that starts OpenSSH's legacy scp
// server — `scp [-v] [-r] [-p] [-d] -t [--] TARGET` (sink, files in) or
// `scp ... -f [--] PATH...` (source, files out), as `scp -O`, paramiko's
// scp module and asyncssh send it — and returns the role's arguments
// (join.Spec.Argv). The words are split as sh would split them: quotes and
// backslashes are honoured, and an unquoted glob character in a source path
// is expanded inside the sandbox, by the role. Anything else a shell would
// interpret (variables, command substitution, redirections, ~, several
// commands) is not recognised: the command runs in the agent's shell as any
// other.
func SCP(command string) ([]string, bool) {
	words, ok := splitWords(command)
	if !ok || len(words) < 2 {
		return nil, false
	}
	prog := words[0]
	if prog.glob || (prog.text != "scp" && !strings.HasSuffix(prog.text, "/scp")) {
		return nil, false
	}
	args := []string{"scp"}
	mode := ""
	i := 1
	for ; i < len(words); i++ {
		w := words[i]
		if w.text == "--" && !w.glob {
			i++
			break
		}
		if !strings.HasPrefix(w.text, "-") || w.glob || len(w.text) < 2 {
			break
		}
		for _, c := range w.text[1:] {
			switch c {
			case 't', 'f':
				if mode != "" {
					return nil, false
				}
				mode = "-" + string(c)
			case 'r', 'p', 'd':
				args = append(args, "-"+string(c))
			case 'v', 'q':
				// Verbosity changes nothing the server sends.
			default:
				return nil, false
			}
		}
	}
	operands := words[i:]
	switch {
	case mode == "" || len(operands) == 0:
		return nil, false
	case mode == "-t" && (len(operands) != 1 || operands[0].glob):
		return nil, false
	}
	args = append(args, mode, "--")
	for _, w := range operands {
		args = append(args, w.pattern)
	}
	return args, true
}

// word is one shell word: its text after quote removal, and the same as a
// filepath.Match pattern, with the glob characters that were quoted
// escaped.
type word struct {
	text, pattern string
	glob          bool // an unquoted *, ? or [
}

// splitWords splits s as a POSIX shell splits one simple command, or
// reports false when s holds anything but words.
func splitWords(s string) ([]word, bool) {
	var words []word
	var cur word
	inWord := false
	add := func(c byte, quoted bool) {
		cur.text += string(c)
		switch {
		case quoted && strings.IndexByte(`*?[\`, c) >= 0:
			cur.pattern += `\` + string(c)
		default:
			cur.pattern += string(c)
		}
		if !quoted && strings.IndexByte("*?[", c) >= 0 {
			cur.glob = true
		}
		inWord = true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur)
				cur, inWord = word{}, false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			for k := i + 1; k <= i+j; k++ {
				add(s[k], true)
			}
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				switch {
				case s[i] == '$' || s[i] == '`':
					return nil, false
				case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0:
					i++
					if s[i] == '\n' {
						continue
					}
				}
				add(s[i], true)
			}
			if i >= len(s) {
				return nil, false
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) || s[i+1] == '\n' {
				return nil, false
			}
			i++
			add(s[i], true)
		case strings.IndexByte("|&;<>()$`\n{}", c) >= 0:
			return nil, false
		case (c == '~' || c == '#') && !inWord:
			return nil, false
		default:
			add(c, false)
		}
	}
	if inWord {
		words = append(words, cur)
	}
	return words, true
}
