package layer

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// DefaultPrefix is the repository prefix of adapted images when --tag is not given.
const DefaultPrefix = "sandboxd"

// Image references follow the distribution spec: lower-case path components
// joined by separators, an optional registry host (with a port) first.
var (
	repoComponent = lazyRegexp(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	registryHost  = lazyRegexp(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?$`)
)

// lazyRegexp compiles expr on first use rather than at init: every start of
// this binary runs every package's init (the CLI of each `sandboxd exec`, the
// visitor and netns helpers), and most of them never adapts an image.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// CheckPrefix reports whether prefix can start an image reference
// ("sandboxd", "registry.example:5000/team/tasks"): a tag or digest there would
// make every name adapt derives from it invalid.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("image prefix is empty: write --tag sandboxd or --tag registry.example/team")
	}
	parts := strings.Split(prefix, "/")
	for i, p := range parts {
		if i == 0 && len(parts) > 1 && (strings.ContainsAny(p, ".:") || p == "localhost") {
			if !registryHost().MatchString(p) {
				return fmt.Errorf("image prefix %q: %q is not a registry host[:port]", prefix, p)
			}
			continue
		}
		if !repoComponent().MatchString(p) {
			return fmt.Errorf("image prefix %q: %q is not a repository name component (lower-case letters, digits, and . _ - between them; no tag): write --tag sandboxd or --tag registry.example/team", prefix, p)
		}
	}
	return nil
}

// repoName makes s usable as one repository path component: lower case,
// anything else a dash, no separator at either end.
func repoName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimRight(b.String(), "-")
	if out == "" {
		return "tasks"
	}
	return out
}

// tagName makes s usable as an image tag: word characters, dots and dashes,
// starting with a word character, at most 128 characters.
func tagName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	out := string(b)
	if out == "" || out[0] == '.' || out[0] == '-' {
		out = "t" + out
	}
	if len(out) > 128 {
		out = out[:128]
	}
	return out
}

// withTag appends ":latest" to a reference that has no tag, because
// docker-archive manifests and `docker image inspect` output always name one.
func withTag(ref string) string {
	slash := strings.LastIndex(ref, "/")
	if strings.Contains(ref[slash+1:], ":") || strings.Contains(ref, "@") {
		return ref
	}
	return ref + ":latest"
}
