package idmap

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/imagefile"
)

// maxUserDB bounds how much of a passwd or group file is read.
const maxUserDB = 16 << 20

// User is a resolved identity: who a phase's processes run as.
type User struct {
	Name   string // empty for a bare uid with no passwd entry
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups from the group file
	Home   string
	Shell  string
}

// ErrUnknownUser is returned when a name has no passwd or group entry.
var ErrUnknownUser = errors.New("unknown user or group")

type passwdEntry struct {
	name        string
	uid, gid    uint32
	home, shell string
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// Users is a snapshot of an image's user database: its passwd and group
// files as they were when ReadUsers read them. The daemon reads it at start,
// before any agent code runs, and resolves every user against it: the agent
// can rewrite the files afterwards.
type Users struct {
	passwd []passwdEntry
	group  []groupEntry
}

// ReadUsers reads the passwd and group files under root (the image's,
// never the host's), resolved as a process whose root it is resolves them.
func ReadUsers(root string) (*Users, error) {
	r, err := imagefile.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("read the users under %s: %w", root, err)
	}
	defer r.Close()
	db := &Users{}
	if db.passwd, err = readPasswd(r); err != nil {
		return nil, err
	}
	if db.group, err = readGroup(r); err != nil {
		return nil, err
	}
	return db, nil
}

// Lookup resolves `user[:group]` like Docker does, from the passwd and group
// files under root, read now (see ReadUsers).
func Lookup(root, spec string) (User, error) {
	db, err := ReadUsers(root)
	if err != nil {
		return User{}, fmt.Errorf("resolve %q: %w", spec, err)
	}
	return db.Lookup(spec)
}

// Lookup resolves `user[:group]` like Docker does, against the snapshot:
//   - "" is root;
//   - a name is its passwd entry with its primary group;
//   - a bare uid uses its passwd entry when there is one, else gid 0
//     (docs/failures.md#user-and-group-resolve-like-docker);
//   - a group is a group name or a bare gid.
//
// Supplementary groups are those whose member list names the user. A name
// with no entry is ErrUnknownUser.
func (db *Users) Lookup(spec string) (User, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" && !hasGroup {
		userPart = "0"
	}
	if userPart == "" {
		return User{}, fmt.Errorf("resolve %q: %w: the user part is empty; write USER or USER:GROUP", spec, ErrUnknownUser)
	}
	users, groups := db.passwd, db.group

	u := User{Home: "/", Shell: "/bin/sh"}
	var found *passwdEntry
	if id, err := strconv.ParseUint(userPart, 10, 32); err == nil {
		u.UID = uint32(id)
		for i := range users {
			if users[i].uid == u.UID {
				found = &users[i]
				break
			}
		}
	} else {
		for i := range users {
			if users[i].name == userPart {
				found = &users[i]
				break
			}
		}
		if found == nil {
			return User{}, fmt.Errorf("resolve user %q: %w: no entry in the image's /etc/passwd; use a uid or add the user to the image", userPart, ErrUnknownUser)
		}
	}
	if found != nil {
		u.Name, u.UID, u.GID = found.name, found.uid, found.gid
		if found.home != "" {
			u.Home = found.home
		}
		if found.shell != "" {
			u.Shell = found.shell
		}
	}

	if hasGroup {
		if groupPart == "" {
			return User{}, fmt.Errorf("resolve %q: %w: the group part is empty; write USER:GROUP or USER", spec, ErrUnknownUser)
		}
		if id, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			u.GID = uint32(id)
		} else {
			var g *groupEntry
			for i := range groups {
				if groups[i].name == groupPart {
					g = &groups[i]
					break
				}
			}
			if g == nil {
				return User{}, fmt.Errorf("resolve group %q: %w: no entry in the image's /etc/group; use a gid or add the group to the image", groupPart, ErrUnknownUser)
			}
			u.GID = g.gid
		}
	}

	if u.Name != "" {
		for _, g := range groups {
			for _, m := range g.members {
				if m == u.Name && g.gid != u.GID {
					u.Groups = append(u.Groups, g.gid)
					break
				}
			}
		}
	}
	return u, nil
}

// GroupID is the gid of the group called name in the group file under root,
// as a process whose root it is sees that file.
func GroupID(root *imagefile.Root, name string) (uint32, error) {
	groups, err := readGroup(root)
	if err != nil {
		return 0, err
	}
	for _, g := range groups {
		if g.name == name {
			return g.gid, nil
		}
	}
	return 0, fmt.Errorf("resolve group %q: %w", name, ErrUnknownUser)
}

func readPasswd(root *imagefile.Root) ([]passwdEntry, error) {
	var out []passwdEntry
	err := scanColonFile(root, "/etc/passwd", 7, func(f []string) {
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		out = append(out, passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid), home: f[5], shell: f[6]})
	})
	return out, err
}

func readGroup(root *imagefile.Root) ([]groupEntry, error) {
	var out []groupEntry
	err := scanColonFile(root, "/etc/group", 4, func(f []string) {
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return
		}
		var members []string
		if f[3] != "" {
			members = strings.Split(f[3], ",")
		}
		out = append(out, groupEntry{name: f[0], gid: uint32(gid), members: members})
	})
	return out, err
}

// scanColonFile calls fn with the fields of each well-formed line of name
// under root; a missing file is an empty one, as for Docker on images without
// /etc/passwd. The files are the image's, which the agent can write:
// imagefile reads them.
func scanColonFile(root *imagefile.Root, name string, fields int, fn func([]string)) error {
	return root.Lines(name, maxUserDB, func(line string) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			return
		}
		if parts := strings.Split(line, ":"); len(parts) >= fields {
			fn(parts[:fields])
		}
	})
}
