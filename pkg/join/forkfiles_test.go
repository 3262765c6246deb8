package join_test

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/idmap"
	"github.com/sandboxd/sandboxd/pkg/join"
)

// A command started while the daemon holds hundreds of descriptors gets its
// own through the slots below the bound, and the slots let go of them once
// it runs: the pipe it writes to reaches EOF when it exits, and its input is
// what it was given (docs/failures.md#a-copy-does-not-copy-the-whole-descriptor-table).
func TestStagedDescriptorsAreLetGo(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	// Fork once first, so that the slots are made below what follows.
	require.Equal(t, 0, sb.Sh(t, "0", "true").Code)
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	var held []*os.File
	for range 600 {
		f, err := os.Open(os.DevNull)
		require.NoError(t, err)
		held = append(held, f)
	}
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()

	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	require.Greater(t, int(outW.Fd()), 600, "the pipes sit above the held descriptors")
	before := join.StagedForks()
	st, err := sb.Target.Command(join.Spec{User: idmap.User{}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/",
		Argv: []string{"sh", "-c", "cat; ls /proc/self/fd | wc -l >&2"}})
	require.NoError(t, err)
	st.Cmd.Stdin, st.Cmd.Stdout = inR, outW
	var errOut bytes.Buffer // read after Wait, which waits for its copy
	st.Cmd.Stderr = &errOut
	p, err := st.Start()
	require.NoError(t, err)
	inR.Close()
	outW.Close()
	assert.Equal(t, before+1, join.StagedForks(), "the command's descriptors were not staged")

	_, err = inW.WriteString("through the slots\n")
	require.NoError(t, err)
	require.NoError(t, inW.Close())
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(outR)
		got <- string(b)
	}()
	select {
	case s := <-got:
		assert.Equal(t, "through the slots\n", s)
	case <-time.After(30 * time.Second):
		t.Fatal("no EOF on the command's stdout: a slot still holds its write end")
	}
	code, _, ok := join.ExitStatus(p.Cmd.Wait())
	require.True(t, ok)
	assert.Equal(t, 0, code, errOut.String())
	// ls, its three descriptors and the one it lists from.
	assert.Equal(t, "4\n", errOut.String(), "the command holds descriptors it was not given")
}

// Where no slot is free, a copy gets the daemon's whole descriptor table, as
// every copy did before staging, and the command runs as it would have:
// with its own descriptors only.
func TestACopyWithoutFreeSlotsGetsTheWholeTable(t *testing.T) {
	sb := sandboxtest.Start(t, bwrap.Config{})
	release := join.HoldStagingSlots()
	defer release()
	// Every free number below the bound taken, so that the command's pipes
	// sit above it and would need a slot.
	for {
		f, err := os.Open(os.DevNull)
		require.NoError(t, err)
		defer f.Close()
		if int(f.Fd()) >= join.StagingBound() {
			break
		}
	}
	before := join.StagedForks()
	r := sb.Sh(t, "0", "echo ran; ls /proc/self/fd | wc -l")
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "ran\n4\n", r.Stdout)
	assert.Equal(t, before, join.StagedForks(), "a fork was staged with no slot free")
}
