package ptyrelay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/bwrap"
	"github.com/sandboxd/sandboxd/pkg/ptyrelay"
)

// The daemon reads the sandbox's /etc/group for every pty (the slave gets the
// tty group), and the agent's root can put anything there: a FIFO, whose
// open would wait for a writer forever, or a link to an endless device.
// Either way the session must start, its pty in the user's own group.
func TestPtySessionSurvivesHostileGroupFile(t *testing.T) {
	for _, tc := range []struct{ name, plant string }{
		{"fifo", "mkfifo /etc/group"},
		{"urandom", "ln -s /dev/urandom /etc/group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Absent from this sandbox's view, /etc/group is made again by
			// the sandbox's root inside the sandbox's own /etc (a tmpfs):
			// the substrate's /etc is never touched.
			sb := sandboxtest.Start(t, bwrap.Config{Hide: []string{"/etc/group"}})
			r := sb.Sh(t, "0", tc.plant)
			require.Equal(t, 0, r.Code, r.Stderr)
			if tc.name == "fifo" {
				sandboxtest.ReleaseFIFOAtCleanup(t, sb.InView("/etc/group"))
			}

			var out sandboxtest.Buffer
			started := make(chan error, 1)
			var s *ptyrelay.Session
			go func() {
				var err error
				s, err = ptyrelay.Start(ptyrelay.Config{
					Target: sb.Target, Spec: sh(t, "1000:1000", "stat -c 'group=%g' $(tty)"),
					PTY:    &ptyrelay.PTY{Term: "xterm", Size: ptyrelay.Size{Cols: 80, Rows: 24}},
					Stdout: &out,
				})
				started <- err
			}()
			select {
			case err := <-started:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("the pty session did not start within 10s with %s: the daemon is stuck reading /etc/group", tc.plant)
			}
			t.Cleanup(func() { s.Kill(); s.Wait() })
			exit := waitExit(t, s)
			assert.Equal(t, 0, exit.Code, out.String())
			assert.Equal(t, "group=1000\r\n", out.String(), "without a readable group file the pty keeps the user's own group")
		})
	}
}
