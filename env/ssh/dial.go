package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
)

// dialer makes one authenticated, host-key-verified SSH connection.
type dialer struct {
	name     string // ssh://user@host:port, for messages
	r        resolved
	opts     Options
	hostKeys *hostKeys
	log      *slog.Logger
	jump     *dialer // ProxyJump hop, nil for a direct connection
}

// dial connects and completes the handshake. ClientConfig.Timeout bounds
// only the TCP connect, so the handshake gets its own deadline on the
// socket, and ctx cancellation closes the socket to abort either.
//
// Errors: a *HostKeyError or *AuthError as they are (retrying will not
// help); everything else (refused, timed out, reset) matches
// env.ErrUnavailable.
func (d *dialer) dial(ctx context.Context) (*xssh.Client, error) {
	addr := d.r.addr()
	var jumpClient *xssh.Client
	var nc net.Conn
	var err error
	if d.jump != nil {
		jumpClient, err = d.jump.dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("ssh: connect to %s through ProxyJump %s: %w", addr, d.jump.r.addr(), err)
		}
		nc, err = dialThrough(ctx, jumpClient, addr, d.opts.ConnectTimeout)
		if err != nil {
			jumpClient.Close()
			return nil, fmt.Errorf("ssh: connect to %s through ProxyJump %s: %w: %w", addr, d.jump.r.addr(), env.ErrUnavailable, err)
		}
	} else {
		dctx, cancel := context.WithTimeout(ctx, d.opts.ConnectTimeout)
		nc, err = d.opts.Dial(dctx, "tcp", addr)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("ssh: connect to %s: %w", addr, ctx.Err())
			}
			return nil, fmt.Errorf("ssh: connect to %s: %w: %w", addr, env.ErrUnavailable, err)
		}
	}
	closeAll := func() {
		nc.Close()
		if jumpClient != nil {
			jumpClient.Close()
		}
	}

	keys, err := loadKeys(ctx, d.r, d.log)
	if err != nil {
		closeAll()
		return nil, err
	}
	defer keys.Close()
	hostKeyCallback, algos, err := d.hostKeys.callback(addr)
	if err != nil {
		closeAll()
		return nil, err
	}
	cfg := &xssh.ClientConfig{
		User:              d.r.user,
		Auth:              []xssh.AuthMethod{xssh.PublicKeys(keys.signers...)},
		HostKeyCallback:   hostKeyCallback,
		HostKeyAlgorithms: algos,
		Timeout:           d.opts.ConnectTimeout,
	}

	// Closing the socket is what aborts a handshake in progress, on a
	// deadline or a cancelled ctx. A timer rather than SetDeadline: a
	// channel through a ProxyJump hop has no deadlines.
	var timedOut atomic.Bool
	timer := time.AfterFunc(d.opts.HandshakeTimeout, func() {
		timedOut.Store(true)
		nc.Close()
	})
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	c, chans, reqs, err := xssh.NewClientConn(nc, addr, cfg)
	inTime := timer.Stop()
	if !stop() && err == nil {
		c.Close()
		err = ctx.Err()
	}
	if !inTime && err == nil {
		c.Close()
		err = errHandshakeTimeout
	}
	if err != nil {
		closeAll()
		var hke *HostKeyError
		switch {
		case errors.As(err, &hke):
			return nil, hke
		case ctx.Err() != nil:
			return nil, fmt.Errorf("ssh: handshake with %s: %w", addr, ctx.Err())
		case timedOut.Load():
			return nil, fmt.Errorf("ssh: handshake with %s: %w: not completed within %s", addr, env.ErrUnavailable, d.opts.HandshakeTimeout)
		case isAuthFailure(err):
			return nil, keys.failure(d.r, err)
		default:
			return nil, fmt.Errorf("ssh: handshake with %s: %w: %w", addr, env.ErrUnavailable, err)
		}
	}
	client := xssh.NewClient(c, chans, reqs)
	if jumpClient != nil {
		// The hop lives exactly as long as the connection through it.
		go func() {
			client.Wait()
			jumpClient.Close()
		}()
	}
	return client, nil
}

var errHandshakeTimeout = errors.New("handshake timed out")

// dialThrough opens a direct-tcpip channel to addr on the jump host.
// x/crypto's Client.Dial takes no context, so the wait is bounded here.
func dialThrough(ctx context.Context, jump *xssh.Client, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := jump.Dial("tcp", addr)
		res <- result{c, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-res:
		return r.c, r.err
	case <-t.C:
	case <-ctx.Done():
	}
	jump.Close() // unblocks Dial; the caller closes jump anyway
	if r := <-res; r.c != nil {
		r.c.Close()
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("no channel to %s within %s", addr, timeout)
}

func isAuthFailure(err error) bool {
	s := err.Error()
	return strings.Contains(s, "unable to authenticate") || strings.Contains(s, "too many authentication failures")
}
