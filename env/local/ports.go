package local

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/corralhq/corral/env"
)

var (
	_ env.PortLister = (*Env)(nil)
	_ env.URLChecker = (*Env)(nil)
	_ env.PortLister = (*child)(nil)
)

// Listeners returns the LISTEN sockets of the process's tree (Survivors'
// members): none, and no error, once the tree is gone.
func (c *child) Listeners(ctx context.Context) ([]env.Listener, error) {
	if c.released.Load() {
		return nil, fmt.Errorf("local: listeners of %d: %w", c.pid, env.ErrReleased)
	}
	c.mu.RLock()
	pids, err := c.tree.survivors(!c.exiting)
	c.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("local: listeners of %d: %w", c.pid, err)
	}
	ls, err := treeListeners(pids)
	if err != nil {
		return nil, fmt.Errorf("local: listeners of %d: %w", c.pid, err)
	}
	return ls, nil
}

// checkURLTimeout caps one CheckURL request: a readiness probe is repeated,
// so one that hangs only delays the next.
const checkURLTimeout = 5 * time.Second

// CheckURL makes one GET request from this machine (see env.URLChecker).
// It uses no proxy (the server is local to the sandbox, and a proxy of the
// environment would answer for it), follows no redirect, keeps no
// connection open afterwards, and does not verify TLS certificates: the
// answer's status is all it reads, it sends no credentials, and dev
// servers serve self-signed certificates.
func (e *Env) CheckURL(ctx context.Context, rawURL string) (int, error) {
	if err := env.ValidateCheckURL(rawURL); err != nil {
		return 0, fmt.Errorf("local: check url: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, checkURLTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, fmt.Errorf("local: check url %s: %w", rawURL, err)
	}
	req.Header.Set("User-Agent", "corral-readiness-check")
	client := &http.Client{
		Transport: &http.Transport{
			Proxy:             nil,
			DialContext:       (&net.Dialer{}).DialContext,
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("local: check url %s: %w", rawURL, err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// socketHolder is a LISTEN socket with its holder (PID 0: unknown).
type socketHolder struct {
	port int
	addr netip.Addr
	pid  int
}

// listenersOf sorts socks by port then address, keeps each (port,
// address) once — preferring an entry with a holder — and adds the
// holders' commands.
func listenersOf(socks []socketHolder, command func(pid int) string) []env.Listener {
	slices.SortFunc(socks, func(a, b socketHolder) int {
		// Among sockets of one (port, address), a known holder first, the
		// lowest PID of them.
		return cmp.Or(cmp.Compare(a.port, b.port), a.addr.Compare(b.addr),
			cmp.Compare(holderRank(a.pid), holderRank(b.pid)))
	})
	socks = slices.CompactFunc(socks, func(a, b socketHolder) bool { return a.port == b.port && a.addr == b.addr })
	if len(socks) == 0 {
		return nil
	}
	commands := map[int]string{}
	out := make([]env.Listener, 0, len(socks))
	for _, s := range socks {
		l := env.Listener{Port: s.port, Addr: s.addr.String(), PID: s.pid}
		if s.pid != 0 {
			cmdline, ok := commands[s.pid]
			if !ok {
				cmdline = command(s.pid)
				commands[s.pid] = cmdline
			}
			l.Command = cmdline
		}
		out = append(out, l)
	}
	return out
}

// holderRank orders PIDs ascending with 0 (no known holder) last.
func holderRank(pid int) uint { return uint(pid - 1) }
