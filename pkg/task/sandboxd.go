package task

import (
	"fmt"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// Sandboxd is sandboxd.toml: what sandboxd needs that Harbor's task.toml lacks
// (see the package documentation for the file's schema).
type Sandboxd struct {
	Listen           string         // listen: SSH listen address "host:port"; "" = the daemon's default
	AuthorizedKeys   string         // authorized_keys: path of the agents' public keys; Load makes it absolute against the task dir
	EgressAllowCIDRs []netip.Prefix // egress_allow_cidrs: non-global ranges the egress proxy may still reach
	Peers            []Peer         // [[peers]]: substrate services offered inside the sandbox
	Entrypoint       []string       // entrypoint: the image's ENTRYPOINT argv; empty = none
	ImageUser        string         // image_user: the image's USER; "" = root
	ImageWorkdir     string         // image_workdir: the image's WORKDIR; "" = /
	ImageEnv         Env            // image_env: the image's ENV, in order
}

// Peer is a substrate-side service offered inside the sandbox at Name:Port.
type Peer struct {
	Name   string // host name the sandbox resolves (a hosts-file line)
	Port   int    // port inside the sandbox
	Target string // substrate address "host:port" the connection is spliced to
}

// ParseSandboxd reads sandboxd.toml's content; name is the file name used in
// errors and warnings. It returns the file's warnings (unknown keys) apart,
// for Load to add to the task's.
func ParseSandboxd(name string, data []byte) (*Sandboxd, []string, error) {
	d, err := newDoc(name, data)
	if err != nil {
		return nil, nil, err
	}
	root := d.root()
	sb := &Sandboxd{}
	at := root.at.Child

	if l, ok := root.str("listen"); ok {
		if err := checkHostPort(l); err != "" {
			d.fail(at("listen"), `%q is not a listen address: %s; write listen = "0.0.0.0:2222"`, l, err)
		} else {
			sb.Listen = l
		}
	}
	if k, ok := root.str("authorized_keys"); ok {
		if strings.TrimSpace(k) == "" {
			d.fail(at("authorized_keys"), `is empty: write authorized_keys = "authorized_keys" (a path relative to the task directory), or remove it`)
		} else {
			sb.AuthorizedKeys = k
		}
	}
	if cidrs, ok := root.strings("egress_allow_cidrs", `["10.20.0.0/16"]`); ok {
		for _, c := range cidrs {
			pfx, err := netip.ParsePrefix(strings.TrimSpace(c))
			switch {
			case err != nil:
				hint := `write a CIDR prefix such as "10.20.0.0/16"`
				if a, err := netip.ParseAddr(strings.TrimSpace(c)); err == nil {
					hint = `write "` + netip.PrefixFrom(a, a.BitLen()).String() + `" for one address`
				}
				d.fail(at("egress_allow_cidrs"), "%q is not a CIDR prefix: %s", c, hint)
			case pfx != pfx.Masked():
				d.fail(at("egress_allow_cidrs"), "%q has host bits set: write %q", c, pfx.Masked().String())
			default:
				sb.EgressAllowCIDRs = append(sb.EgressAllowCIDRs, pfx)
			}
		}
	}
	if peers, ok := root.tables("peers"); ok {
		seen := map[string]bool{}
		for _, pt := range peers {
			p := readPeer(pt)
			pt.done()
			if p.Name == "" {
				continue
			}
			if seen[p.Name] {
				d.fail(pt.at.Child("name"), "peer %q is declared twice: give each peer its own name", p.Name)
				continue
			}
			seen[p.Name] = true
			sb.Peers = append(sb.Peers, p)
		}
	}
	if ep, ok := root.strings("entrypoint", `["/docker-entrypoint.sh"]`); ok {
		sb.Entrypoint = ep
	}
	if u, ok := root.str("image_user"); ok {
		sb.ImageUser = u
	}
	if wd, ok := root.str("image_workdir"); ok {
		if wd != "" && !path.IsAbs(wd) {
			d.fail(at("image_workdir"), `%q is not an absolute path: write image_workdir = "/app"`, wd)
		} else if wd != "" {
			sb.ImageWorkdir = path.Clean(wd)
		}
	}
	if envs, ok := root.strings("image_env", `["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]`); ok {
		for _, kv := range envs {
			k, v, found := strings.Cut(kv, "=")
			if !found || k == "" || strings.ContainsRune(kv, 0) {
				d.fail(at("image_env"), `%q is not NAME=VALUE: write each entry as Docker's config does, "LANG=C.UTF-8"`, kv)
				continue
			}
			sb.ImageEnv = merge(sb.ImageEnv, Env{{Name: k, Value: v}})
		}
	}
	root.done()
	if err := d.err(); err != nil {
		return nil, nil, err
	}
	return sb, d.warningTexts(), nil
}

func readPeer(pt *table) Peer {
	d := pt.d
	at := pt.at.Child
	var p Peer
	if n, ok := pt.str("name"); ok {
		if n = strings.ToLower(n); !validPeerName(n) {
			d.fail(at("name"), `%q is not a host name (letters, digits, hyphens, dots; not "localhost"): write name = "db"`, n)
		} else {
			p.Name = n
		}
	} else if !pt.has("name") {
		d.fail(pt.at, `a peer needs a name: write name = "db"`)
	}
	if n, ok := pt.integer("port", "5432"); ok {
		if n < 1 || n > 65535 {
			d.fail(at("port"), "%d is not a port: write a port between 1 and 65535", n)
		} else {
			p.Port = int(n)
		}
	} else if !pt.has("port") {
		d.fail(pt.at, "a peer needs the port it is offered on inside the sandbox: write port = 5432")
	}
	if tg, ok := pt.str("target"); ok {
		if err := checkHostPort(tg); err != "" || strings.HasPrefix(tg, ":") {
			if err == "" {
				err = "it has no host"
			}
			d.fail(at("target"), `%q is not a substrate address: %s; write target = "db:5432"`, tg, err)
		} else {
			p.Target = tg
		}
	} else if !pt.has("target") {
		d.fail(pt.at, `a peer needs the substrate address it reaches: write target = "db:5432"`)
	}
	if p.Port == 0 || p.Target == "" {
		p.Name = "" // incomplete: reported above, not listed
	}
	return p
}

func validPeerName(n string) bool {
	if n == "" || n == "localhost" || len(n) > 253 {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if !hostLabel().MatchString(l) {
			return false
		}
	}
	return true
}

// checkHostPort returns "" when s is host:port with a numeric port 1–65535.
func checkHostPort(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "it is not host:port"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "the port must be a number between 1 and 65535"
	}
	return ""
}

// ParsePeer reads a peer as `serve --peer` writes it, NAME:PORT[=TARGET],
// with the checks a [[peers]] table gets. TARGET defaults to
// 127.0.0.1:PORT, the daemon's default for a peer without one.
func ParsePeer(s string) (Peer, error) {
	spec, target, hasTarget := strings.Cut(strings.TrimSpace(s), "=")
	example := `write NAME:PORT or NAME:PORT=HOST:PORT, such as "db:5432=127.0.0.1:15432"`
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return Peer{}, fmt.Errorf("peer %q has no port: %s", s, example)
	}
	name, port := strings.ToLower(spec[:i]), spec[i+1:]
	if !validPeerName(name) {
		return Peer{}, fmt.Errorf("peer %q: %q is not a host name (letters, digits, hyphens, dots; not \"localhost\"): %s", s, name, example)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return Peer{}, fmt.Errorf("peer %q: %q is not a port between 1 and 65535: %s", s, port, example)
	}
	if !hasTarget {
		target = "127.0.0.1:" + port
	}
	if msg := checkHostPort(target); msg != "" || strings.HasPrefix(target, ":") {
		if msg == "" {
			msg = "it has no host"
		}
		return Peer{}, fmt.Errorf("peer %q: target %q is not a substrate address: %s; %s", s, target, msg, example)
	}
	return Peer{Name: name, Port: n, Target: target}, nil
}
