// Package tarcopy is `sandboxd cp`: docker cp's semantics over a tar stream
// between the substrate and the sandbox's view.
//
// One side of every copy is the agent's: its names, its symlinks, its file
// types. So the side inside the sandbox runs as a child role joined into the
// sandbox as a session is (role_linux.go), where a symlink can only ever
// resolve inside the sandbox's view and the harness dir is absent;
// and an archive is always unpacked beneath a directory descriptor, one
// component at a time, never following a symlink (RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS), refusing `..`, absolute names, devices and FIFOs,
// whichever side wrote it. Nothing of a copy is held in memory whole: it
// streams, so it has no size limit.
//
// WARNING: security-sensitive. After any change run, as root:
//
//	go test ./pkg/tarcopy/ ./cmd/sandboxd/ -run 'Copy|Cp'
package tarcopy

import "errors"

// Docker's errors, with docker's words, for the cases docker cp refuses.
var (
	ErrNotDirectory  = errors.New("not a directory")
	ErrDirNotExists  = errors.New("no such directory")
	ErrCannotCopyDir = errors.New("cannot copy directory")
)

// ErrRefused marks an archive entry that would land outside the
// destination, or that is a device or a FIFO.
var ErrRefused = errors.New("refused")

// Options are how an archive is unpacked.
type Options struct {
	// Archive keeps the archive's uids, gids and setuid/setgid bits
	// (docker cp -a); otherwise every entry is owned by UID:GID and loses
	// those bits.
	Archive  bool
	UID, GID int
}
