package netrules

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/tail"
	"github.com/sandboxd/sandboxd/pkg/join"
)

const role = "netrules"

func init() { childproc.Add(role, child) }

// Apply installs p in the sandbox's network namespace, from a child joined
// to its user and network namespaces only (the user namespace gives it
// CAP_NET_ADMIN over the network namespace, which no session has). The
// error names what the kernel refused.
func Apply(ctx context.Context, t join.Target, p Plan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	cmd := t.Join([]string{"user", "net"}, role, string(b))
	stderr := tail.New(4096)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the rules helper: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	if err := cmd.Wait(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("install the sandbox's network rules: %s", msg)
	}
	return nil
}

// child runs in the sandbox's user and network namespaces.
func child(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "netrules: usage: PLAN-JSON")
		return 2
	}
	var p Plan
	if err := json.Unmarshal([]byte(args[0]), &p); err != nil {
		fmt.Fprintf(os.Stderr, "netrules: plan: %v\n", err)
		return 2
	}
	if err := Install(p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
