package netrules

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/google/nftables"

	"github.com/sandboxd/sandboxd/internal/childproc"
	"github.com/sandboxd/sandboxd/internal/tail"
	"github.com/sandboxd/sandboxd/pkg/join"
)

const (
	role         = "netrules"
	roleAnswered = "netrules-answered"
)

func init() {
	childproc.Add(role, child)
	childproc.Add(roleAnswered, answeredChild)
}

// Apply installs p in the sandbox's network namespace, from a child joined
// to its user and network namespaces only (the user namespace gives it
// CAP_NET_ADMIN over the network namespace, which no session has). The
// error names what the kernel refused.
func Apply(ctx context.Context, t join.Target, p Plan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return runChild(ctx, t, role, string(b))
}

// runChild runs a role of this package joined to the sandbox's user and
// network namespaces, and returns what it said on failure.
func runChild(ctx context.Context, t join.Target, role string, args ...string) error {
	cmd := t.Join([]string{"user", "net"}, role, args...)
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
		return fmt.Errorf("the sandbox's network rules: %s", msg)
	}
	return nil
}

// AddAnswered adds addrs (IPv4; others are left out) to the answered set
// of rules installed with Plan.Answered, from a joined child as Apply is.
func AddAnswered(ctx context.Context, t join.Target, addrs []netip.Addr) error {
	var args []string
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			args = append(args, a.String())
		}
	}
	if len(args) == 0 {
		return nil
	}
	return runChild(ctx, t, roleAnswered, args...)
}

// answeredChild adds its arguments to the answered set.
func answeredChild(args []string) int {
	var elems []nftables.SetElement
	for _, s := range args {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			fmt.Fprintf(os.Stderr, "netrules: %q is no IPv4 address\n", s)
			return 2
		}
		elems = append(elems, nftables.SetElement{Key: a.AsSlice()})
	}
	c, err := nftables.New()
	if err == nil {
		set := &nftables.Set{Table: ipv4Table, Name: AnsweredSet, KeyType: nftables.TypeIPAddr}
		if err = c.SetAddElements(set, elems); err == nil {
			err = c.Flush()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, &Error{Step: "add to the answered set", Err: err})
		return 1
	}
	return 0
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
