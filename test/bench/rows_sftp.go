package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// imageSFTPServer is where Debian's openssh-sftp-server puts OpenSSH's.
const imageSFTPServer = "/usr/lib/openssh/sftp-server"

// benchSFTP: upload and download of 1 GiB with OpenSSH's `sftp` client,
// through the same daemon, connection set-up and SSH transport on both
// sides: sandboxd's own file server (the sftp subsystem) against the
// image's OpenSSH sftp-server, which `sftp -s PATH` starts with an exec
// request in the sandbox, joined as the agent like any session.
func benchSFTP(ctx context.Context, b *bench) error {
	sftp, err := exec.LookPath("sftp")
	if err != nil {
		b.skipped = append(b.skipped, "sftp: no sftp client (apt-get install openssh-client)")
		return nil
	}
	if _, err := os.Stat(imageSFTPServer); err != nil {
		b.skipped = append(b.skipped, "sftp: no "+imageSFTPServer+" to compare with (apt-get install openssh-sftp-server)")
		return nil
	}
	d, err := b.mainDaemon(ctx)
	if err != nil {
		return err
	}
	size := pick[int64](b, 1<<30, 128<<20)
	dir := filepath.Join(b.tmp, "sftp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(dir, "src.bin")
	if err := randomFile(src, size); err != nil {
		return err
	}
	key := filepath.Join(b.tmp, "agent_key")
	if err := os.WriteFile(key, d.keyPEM, 0o600); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(d.sshAddr)
	// once moves the file one way with one server and returns MiB/s; the
	// remote side is the same directory, which the sandbox shares.
	once := func(image, up bool) func() (float64, error) {
		return func() (float64, error) {
			remote, local := filepath.Join(dir, "remote.bin"), filepath.Join(dir, "back.bin")
			cmd := fmt.Sprintf("get %s %s", remote, local)
			check := local
			if up {
				cmd, check = fmt.Sprintf("put %s %s", src, remote), remote
			}
			os.Remove(check)
			batch := filepath.Join(dir, "batch")
			if err := os.WriteFile(batch, []byte(cmd+"\n"), 0o644); err != nil {
				return 0, err
			}
			args := []string{"-i", key, "-P", port, "-c", "aes128-gcm@openssh.com", "-b", batch,
				"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"}
			if image {
				args = append(args, "-s", imageSFTPServer)
			}
			c := exec.CommandContext(ctx, sftp, append(args, "root@"+host)...)
			var errb strings.Builder
			c.Stdout, c.Stderr = io.Discard, &errb
			t0 := time.Now()
			err := c.Run()
			dt := time.Since(t0)
			if err != nil {
				return 0, fmt.Errorf("sftp %q: %v: %s", cmd, err, errb.String())
			}
			st, err := os.Stat(check)
			if err != nil || st.Size() != size {
				return 0, fmt.Errorf("sftp %q: %s is not %d bytes: %v", cmd, check, size, err)
			}
			return mibPerSec(size, dt), nil
		}
	}
	for _, way := range []struct {
		id, name string
		up       bool
	}{{"sftp-upload", "upload", true}, {"sftp-download", "download", false}} {
		if !way.up {
			// What is downloaded is what was uploaded last.
			if _, err := once(false, true)(); err != nil {
				return err
			}
		}
		s, err := alternate(ctx, 1, pick(b, 5, 2), once(true, way.up), once(false, way.up))
		if err != nil {
			return err
		}
		r := b.addPair(way.id, fmt.Sprintf("SFTP %s, %s, OpenSSH's `sftp` client", way.name, sizeText(size)), "MiB/s", "OpenSSH sftp-server", s, 1.0, false)
		r.detail = "the same daemon and connection set-up on both sides: the sftp subsystem (sandboxd's own server) against `sftp -s " + imageSFTPServer + "` (the image's, started by an exec request); a new connection per sample"
	}
	return nil
}

// randomFile writes size random bytes at path: nothing on the way can
// compress or skip them.
func randomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
