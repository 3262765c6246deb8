package join_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

const roleLowDescriptors = "test-join-low-descriptors"

func init() { childproc.Add(roleLowDescriptors, joinWithLowDescriptors) }

// lowDescriptorResult is what the role saw of each join.
type lowDescriptorResult struct {
	ReportFD int    `json:"report_fd"` // the lowest free descriptor before the joins: where the report pipe lands
	Started  string `json:"started"`   // "" when a command that exists started and exited 0
	Missing  string `json:"missing"`   // the error for a command that does not exist
	Code     int    `json:"code"`      // its SetupError code
}

// joinWithLowDescriptors runs with descriptors 0, 1 and 2 closed, as a daemon
// whose stdio was closed would, so that the report pipe of each join gets
// a number below the descriptors handed to the child. It joins the sandbox
// named in its arguments (every namespace, the pid one included, so the
// forked copy forks again) twice: once for a command that runs, once for one
// that does not exist.
func joinWithLowDescriptors(args []string) int {
	out := os.NewFile(3, "result")
	pid, _ := strconv.Atoi(args[0])
	target := join.Target{PID: pid, Namespaces: strings.Split(args[1], ",")}
	// Everything a join opens for itself is opened now, above 2: the
	// namespaces, and the runtime's poller (by a file it serves).
	if target.Hold() != nil {
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 1
	}
	defer r.Close()
	defer w.Close()
	for fd := 0; fd <= 2; fd++ {
		unix.Close(fd)
	}
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0) // descriptor 0
	if err != nil {
		return 1
	}
	devnull := os.NewFile(uintptr(null), os.DevNull)
	var res lowDescriptorResult
	probe, _ := unix.Dup(null)
	res.ReportFD = probe
	unix.Close(probe)
	spec := join.Spec{User: idmap.User{}, Env: []string{"PATH=/usr/bin:/bin"}, Argv: []string{"true"}}
	run := func(spec join.Spec) error {
		st, err := target.Command(spec)
		if err != nil {
			return err
		}
		st.Cmd.Stdin, st.Cmd.Stdout, st.Cmd.Stderr = devnull, devnull, devnull
		if _, err := st.Start(); err != nil {
			return err
		}
		return st.Cmd.Wait()
	}
	if err := run(spec); err != nil {
		res.Started = err.Error()
	}
	spec.Argv = []string{"no-such-program"}
	err = run(spec)
	if err != nil {
		res.Missing = err.Error()
	}
	var se *join.SetupError
	if errors.As(err, &se) {
		res.Code = se.Code
	}
	json.NewEncoder(out).Encode(res)
	return 0
}

// The forked copy reports on a pipe whose number may be below the
// descriptors it hands over (a daemon with its stdio closed). Both of its
// reports must arrive: the pid of the copy in the sandbox's pid namespace,
// and a failure after the descriptors were moved.
func TestJoinReportsThroughLowDescriptors(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	res, err := os.CreateTemp(t.TempDir(), "result")
	require.NoError(t, err)
	cmd := exec.Command("/proc/self/exe", strconv.Itoa(sb.Target.PID), strings.Join(sb.Target.Namespaces, ","))
	cmd.Env = childproc.Environ(roleLowDescriptors)
	cmd.ExtraFiles = []*os.File{res}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(res.Name())
	require.NoError(t, err)
	var got lowDescriptorResult
	require.NoError(t, json.Unmarshal(b, &got), "%s", b)
	require.Less(t, got.ReportFD, 3, "the setup did not leave a low descriptor free: %+v", got)
	assert.Empty(t, got.Started, "a command that exists did not start: the pid report was lost")
	assert.Equal(t, join.ExitNotFound, got.Code, "the failure report was lost: %s", got.Missing)
	assert.Contains(t, got.Missing, "not found", fmt.Sprint(got))
}
