package trial

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
	"github.com/sandboxd/sandboxd/pkg/grade"
	"github.com/sandboxd/sandboxd/pkg/task"
)

func TestMain(m *testing.M) {
	childproc.Maybe()
	os.Exit(m.Run())
}

// fakeResolver maps names to one address each, for the proxies and peers.
type fakeResolver map[string]string

func (f fakeResolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	if a, ok := f[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

const tasksDir = "../../testdata/tasks"

// The test upstream of testdata/tasks/README.md: the files of upstream/ and a
// fresh /token per trial, at an address no daemon listens on.
const upstreamAddr = "127.0.0.7:18080"

var upstreamNames = fakeResolver{
	"allowed.sandboxd.test": "127.0.0.7",
	"refused.sandboxd.test": "127.0.0.7",
	"tools.sandboxd.test":   "127.0.0.7",
}

// startTaskUpstream serves the upstream; newTrial gives /token a fresh value,
// the same for every request of one trial.
func startTaskUpstream(t *testing.T) (newTrial func()) {
	var token atomic.Value
	newTrial = func() {
		var b [12]byte
		rand.Read(b[:])
		token.Store(hex.EncodeToString(b[:]) + "\n")
	}
	newTrial()
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(filepath.Join(tasksDir, "upstream"))))
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(token.Load().(string)))
	})
	ln, err := net.Listen("tcp", upstreamAddr)
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return newTrial
}

// TestTrial_OwnTasks runs every task of testdata/tasks through Run — the
// oracle over a real SSH session, then the agent that does nothing — and
// checks what each task's metadata says it must score.
func TestTrial_OwnTasks(t *testing.T) {
	sandboxtest.RequireRoot(t)
	sandboxtest.SharedTests(t)
	newTrial := startTaskUpstream(t)
	entries, err := os.ReadDir(tasksDir)
	require.NoError(t, err)
	ran := 0
	for _, e := range entries {
		dir := filepath.Join(tasksDir, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "task.toml")); err != nil {
			continue
		}
		tk, err := task.Load(dir)
		require.NoError(t, err)
		for _, agent := range []string{"oracle", "nop"} {
			t.Run(e.Name()+"/"+agent, func(t *testing.T) {
				want, ok := tk.Metadata["sandboxd_expect_"+agent].(string)
				require.True(t, ok, "task.toml [metadata] sandboxd_expect_%s", agent)
				status, reward, _ := strings.Cut(want, ":")
				newTrial()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				v, err := Run(ctx, Config{TaskDir: dir, Agent: agent, Resolver: upstreamNames, Log: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				require.Equal(t, grade.Status(status), v.Status, "%s\n%s", v.Message, v.StdoutTail)
				if reward != "" {
					r, err := strconv.ParseFloat(reward, 64)
					require.NoError(t, err)
					assert.Equal(t, r, v.Reward["reward"], v.StdoutTail)
				}
				ran++
			})
		}
	}
	assert.GreaterOrEqual(t, ran, 20, "every task ran its oracle and its nop")
}
