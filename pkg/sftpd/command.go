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
	// Every exec request comes here first: anything that cannot be scp's
	// costs no more than a scan.
	if len(command) > maxSCPCommand || !strings.Contains(command, "scp") {
		return nil, false
	}
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

// maxSCPCommand bounds the command SCP reads: far above what scp clients
// send (a few paths), far below what costs the daemon to split. A longer
// command runs in the agent's shell, as any other.
const maxSCPCommand = 64 << 10

// word is one shell word: its text after quote removal, and the same as a
// filepath.Match pattern, with the glob characters that were quoted
// escaped.
type word struct {
	text, pattern string
	glob          bool // an unquoted *, ? or [
}

// wordBuilder grows a word in amortised constant time a byte.
type wordBuilder struct {
	text, pattern strings.Builder
	glob          bool
}

func (b *wordBuilder) word() word {
	return word{text: b.text.String(), pattern: b.pattern.String(), glob: b.glob}
}

// splitWords splits s as a POSIX shell splits one simple command, or
// reports false when s holds anything but words.
func splitWords(s string) ([]word, bool) {
	var words []word
	cur := &wordBuilder{}
	inWord := false
	add := func(c byte, quoted bool) {
		cur.text.WriteByte(c)
		if quoted && strings.IndexByte(`*?[\`, c) >= 0 {
			cur.pattern.WriteByte('\\')
		}
		cur.pattern.WriteByte(c)
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
				words = append(words, cur.word())
				cur, inWord = &wordBuilder{}, false
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
		words = append(words, cur.word())
	}
	return words, true
}
