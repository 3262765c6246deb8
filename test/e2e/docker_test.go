//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/pkg/collect"
)

// docker runs the docker CLI and returns stdout; a failure fails the test
// with stderr.
func docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := dockerErr(context.Background(), args...)
	require.NoError(t, err, "docker %s", strings.Join(args, " "))
	return out
}

func dockerErr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%w: %s%s", err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// securityFlags are the documented `docker run` options (docs/container-flags.md).
func securityFlags(repo string) []string {
	return []string{
		"--security-opt", "seccomp=" + filepath.Join(repo, "images", "seccomp.json"),
		"--security-opt", "systempaths=unconfined",
		"--security-opt", "apparmor=unconfined",
	}
}

// container is one adapted image running as Harbor runs it.
type container struct {
	ID       string
	IP       string
	Ready    time.Duration     // docker run → sandboxd status answers
	sidecars map[string]string // compose service → container ID
}

// runContainer starts image with the security options given (the
// documented ones: securityFlags), Docker's default capabilities, the
// agents' key by value and Harbor's trailing command, and waits until
// sandboxd's status answers.
func (e *env) runContainer(t *testing.T, image string, security []string, extra ...string) *container {
	t.Helper()
	args := []string{"run", "-d", "--label", "org.sandboxd.e2e=1"}
	args = append(args, security...)
	args = append(args, "-e", "SANDBOXD_AUTHORIZED_KEYS="+e.pubKey)
	args = append(args, extra...)
	args = append(args, image, "sh", "-c", "sleep infinity")
	start := time.Now()
	id := strings.TrimSpace(docker(t, args...))
	t.Cleanup(func() { dockerErr(context.Background(), "rm", "-f", id) })
	c := &container{ID: id}
	c.Ready = e.waitReady(t, id, start)
	c.IP = containerIP(t, id)
	return c
}

// waitReady polls `sandboxd status` through docker exec, as a harness would
// before it lets an agent in.
func (e *env) waitReady(t *testing.T, id string, start time.Time) time.Duration {
	t.Helper()
	deadline := start.Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if _, err := dockerErr(context.Background(), "exec", id, "/media/sandboxd/bin/sandboxd", "status"); err == nil {
			return time.Since(start)
		} else {
			last = err
		}
		if state, _ := dockerErr(context.Background(), "inspect", "-f", "{{.State.Running}}", id); strings.TrimSpace(state) == "false" {
			logs, _ := dockerErr(context.Background(), "logs", id)
			t.Fatalf("container %s exited before it was ready; its logs:\n%s", id[:12], logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, _ := dockerErr(context.Background(), "logs", id)
	t.Fatalf("sandboxd status did not answer within 90 s (%v); logs:\n%s", last, logs)
	return 0
}

func containerIP(t *testing.T, id string) string {
	t.Helper()
	ip := strings.TrimSpace(docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", id))
	ip, _, _ = strings.Cut(ip, " ")
	require.NotEmpty(t, ip, "container %s has no IP address", id)
	return ip
}

// sshRun runs a command over SSH with the OpenSSH client, stdin from a file
// (or nothing), as a harness drives an agent session.
func (e *env) sshRun(ctx context.Context, ip, command, stdinFile string) (string, error) {
	args := []string{"-i", e.privKey, "-p", "2222",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR",
		"root@" + ip, command}
	cmd := exec.CommandContext(ctx, "ssh", args...)
	if stdinFile != "" {
		f, err := os.Open(stdinFile)
		if err != nil {
			return "", err
		}
		defer f.Close()
		cmd.Stdin = f
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// verdict is what `sandboxd grade --json` prints.
type verdict struct {
	Status  string          `json:"status"`
	Reward  json.RawMessage `json:"reward"`
	Message string          `json:"message"`
	Stdout  string          `json:"stdout_tail"`
	// Collected is what followed the grading: hooks and artifacts.
	Collected *collect.Result `json:"collected"`
}

// reward is the "reward" metric, whether the verdict holds one number or a
// map of metrics.
func (v verdict) reward() (float64, bool) {
	var n float64
	if err := json.Unmarshal(v.Reward, &n); err == nil {
		return n, true
	}
	var m map[string]float64
	if err := json.Unmarshal(v.Reward, &m); err == nil {
		n, ok := m["reward"]
		return n, ok
	}
	return 0, false
}

func (e *env) grade(t *testing.T, id string, timeout time.Duration) verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := dockerErr(ctx, "exec", id, "/media/sandboxd/bin/sandboxd", "grade", "--json")
	var v verdict
	require.NoError(t, json.Unmarshal([]byte(out), &v), "grade printed no verdict (%v): %s", err, out)
	return v
}

// The names the tasks use for the test upstream (network aliases of its
// container, upstreamHost).
var upstreamNames = []string{"allowed.sandboxd.test", "refused.sandboxd.test", "tools.sandboxd.test"}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// copyTree copies a task directory with its permission bits.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, b, info.Mode().Perm()); err != nil {
			return err
		}
		return os.Chmod(target, info.Mode().Perm())
	})
	require.NoError(t, err)
}
