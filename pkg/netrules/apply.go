package netrules

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/pkg/join"
)

// Rules are the rules Apply installed, held for adding to the answered
// set (Plan.Answered).
type Rules struct {
	mu  sync.Mutex
	nft *socket
}

// Apply installs p in the sandbox's network namespace. The route and the
// rules go over two netlink sockets that one forked copy makes there
// (join.Target.Sockets), without an exec; the daemon sends on them itself
// (docs/failures.md#the-network-rules-are-not-a-programs-start). The error
// names what the kernel refused.
func Apply(ctx context.Context, t join.Target, p Plan) (*Rules, error) {
	files, errs, err := t.Sockets(ctx, []join.SocketSpec{
		{Kind: join.NetlinkSocket, Proto: unix.NETLINK_ROUTE},
		{Kind: join.NetlinkSocket, Proto: unix.NETLINK_NETFILTER},
	})
	if err != nil {
		return nil, &Error{Step: "open netlink inside the sandbox", Err: err}
	}
	for _, e := range errs {
		if e != nil {
			closeAll(files)
			return nil, &Error{Step: "open netlink inside the sandbox", Err: e}
		}
	}
	route, err := newSocket(files[0])
	if err != nil {
		closeAll(files)
		return nil, err
	}
	defer route.Close()
	nft, err := newSocket(files[1])
	if err != nil {
		files[1].Close()
		return nil, err
	}
	if err := install(route, nft, p); err != nil {
		nft.Close()
		return nil, err
	}
	// The socket is kept until Close, for the answered set, and because
	// closing a socket that has sent nftables a batch takes the kernel
	// about 11 ms here, which serve's start need not wait for.
	r := &Rules{nft: nft}
	return r, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// Close lets the rules' socket go; the rules stay. An addition after it
// is refused.
func (r *Rules) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nft == nil {
		return nil
	}
	err := r.nft.Close()
	r.nft = nil
	return err
}

// AddAnswered adds addrs (IPv4; others are left out) to the answered set.
func (r *Rules) AddAnswered(addrs []netip.Addr) error {
	var elems []nftables.SetElement
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			elems = append(elems, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	if len(elems) == 0 {
		return nil
	}
	if r == nil {
		return errors.New("no rules were installed")
	}
	msgs, err := nftMessages(func(c *nftables.Conn) error {
		set := &nftables.Set{Table: ipv4Table, Name: AnsweredSet, KeyType: nftables.TypeIPAddr}
		return c.SetAddElements(set, elems)
	})
	if err == nil {
		r.mu.Lock()
		if r.nft == nil {
			err = errors.New("the rules' socket is closed: serve is stopping")
		} else {
			err = r.nft.exchange(msgs)
		}
		r.mu.Unlock()
	}
	if err != nil {
		return &Error{Step: "add to the answered set", Err: err}
	}
	return nil
}
