package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procnet"
	"golang.org/x/sys/unix"
)

var _ env.PortLister = (*detached)(nil)

// Listeners returns the LISTEN sockets of the process's tree (Survivors'
// members): none, and no error, once the tree is gone.
func (d *detached) Listeners(ctx context.Context) ([]env.Listener, error) {
	if d.released.Load() {
		return nil, d.errorf("listeners of", env.ErrReleased)
	}
	pids, err := d.tree.survivors(d.leaderLive())
	if err != nil {
		return nil, d.errorf("listeners of", err)
	}
	ls, err := treeListeners(pids)
	if err != nil {
		return nil, d.errorf("listeners of", err)
	}
	return ls, nil
}

// Listeners returns every LISTEN socket of this machine's network
// namespace (the supervisor's), each with the lowest PID holding it where
// the supervisor may read that process's fds, else PID 0.
func (e *Env) Listeners(ctx context.Context) ([]env.Listener, error) {
	socks, err := procnet.Listening(0)
	if err != nil {
		return nil, fmt.Errorf("local: listeners: %w", err)
	}
	wanted := make(map[uint64]bool, len(socks))
	for _, s := range socks {
		wanted[s.Inode] = true
	}
	holders, err := procnet.AllSocketInodes(wanted)
	if err != nil {
		return nil, fmt.Errorf("local: listeners: %w", err)
	}
	out := make([]socketHolder, 0, len(socks))
	for _, s := range socks {
		out = append(out, socketHolder{port: s.Port, addr: s.Addr, pid: holders[s.Inode]})
	}
	return listenersOf(out, procnet.Command), nil
}

// treeListeners returns the LISTEN sockets held by pids. Members may sit in
// network namespaces of their own (unshare -n): each namespace's tables
// are read once, through one of its members. Members that ended meanwhile
// are skipped.
func treeListeners(pids []int) ([]env.Listener, error) {
	if len(pids) == 0 {
		return nil, nil
	}
	byNS := map[string][]int{}
	var order []string
	for _, pid := range pids {
		ns, err := procnet.NetNS(pid)
		if err != nil {
			continue // gone, or not ours to read: it holds nothing we can see
		}
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], pid)
	}
	var out []socketHolder
	for _, ns := range order {
		members := byNS[ns]
		socks, err := nsListening(members)
		if err != nil {
			return nil, err
		}
		if len(socks) == 0 {
			continue
		}
		wanted := make(map[uint64]bool, len(socks))
		for _, s := range socks {
			wanted[s.Inode] = true
		}
		holders := procnet.SocketInodes(members, wanted)
		for _, s := range socks {
			if pid, ok := holders[s.Inode]; ok {
				out = append(out, socketHolder{port: s.Port, addr: s.Addr, pid: pid})
			}
		}
	}
	return listenersOf(out, procnet.Command), nil
}

// nsListening reads the socket tables of the namespace members share,
// through the first member still there.
func nsListening(members []int) ([]procnet.Socket, error) {
	for _, pid := range members {
		socks, err := procnet.Listening(pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EINVAL) {
			continue // ended meanwhile
		}
		if err != nil {
			return nil, err
		}
		return socks, nil
	}
	return nil, nil
}
