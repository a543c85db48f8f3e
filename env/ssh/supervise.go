package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	xssh "golang.org/x/crypto/ssh"
)

// supervise watches the connection and re-establishes it when it drops.
// A connection closed for idleness is dialled again only on demand.
func (c *conn) supervise(client *xssh.Client) {
	defer c.wg.Done()
	for {
		err := c.watch(client)
		if c.ctx.Err() != nil {
			return
		}
		var next *xssh.Client
		if errors.Is(err, errIdle) {
			c.stopShells() // their sessions died with the client
			c.log.Info("ssh: closed the idle connection; the next use dials again", "idle_close", c.d.opts.IdleClose)
			next = c.dialOnDemand()
		} else {
			c.setDown(fmt.Errorf("connection lost: %w", err))
			c.log.Warn("ssh: connection lost; reconnecting", "target", c.d.name, "err", err)
			next = c.reconnect()
		}
		if next == nil {
			return
		}
		client = next
	}
}

// errIdle ends watch when the connection was closed for idleness.
var errIdle = errors.New("idle")

// reconnect dials with exponential backoff until it succeeds (the new
// client, in use) or Close (nil).
func (c *conn) reconnect() *xssh.Client {
	backoff := c.d.opts.ReconnectMin
	for {
		t := time.NewTimer(jitter(backoff))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		next, err := c.d.dial(c.ctx)
		if err == nil {
			if !c.setUp(next) {
				next.Close()
				return nil
			}
			c.log.Info("ssh: reconnected", "target", c.d.name)
			return next
		}
		if c.ctx.Err() != nil {
			return nil
		}
		c.setDown(err)
		var hke *HostKeyError
		if errors.As(err, &hke) {
			c.log.Error("ssh: reconnect refused: host key", "target", c.d.name, "err", err)
		} else {
			c.log.Warn("ssh: reconnect failed", "target", c.d.name, "err", err, "retry_in", backoff)
		}
		backoff = min(backoff*2, c.d.opts.ReconnectMax)
	}
}

// dialOnDemand waits until a call needs the idle connection, then dials
// once per request: a failure goes to the callers waiting (openSession)
// and the connection stays idle, with no retries in the background for a
// host nobody uses. It returns the new client, in use, or nil after Close.
func (c *conn) dialOnDemand() *xssh.Client {
	for {
		select {
		case <-c.ctx.Done():
			return nil
		case <-c.wake:
		}
		next, err := c.d.dial(c.ctx)
		if err == nil {
			if !c.setUp(next) {
				next.Close()
				return nil
			}
			c.log.Info("ssh: connected again for a call")
			return next
		}
		if c.ctx.Err() != nil {
			return nil
		}
		c.mu.Lock()
		c.downErr = err
		c.idleFails++
		c.notifyLocked()
		c.mu.Unlock()
		c.log.Warn("ssh: dial on demand failed", "err", err)
	}
}

// jitter spreads reconnects of many supervisors over ±20% of d.
func jitter(d time.Duration) time.Duration {
	return d*8/10 + rand.N(d*4/10+1)
}

// watch blocks until client dies (or Close), sending keepalives
// meanwhile; a keepalive without answer in time closes the client.
func (c *conn) watch(client *xssh.Client) error {
	dead := make(chan error, 1)
	go func() { dead <- client.Wait() }()
	var tick, idleTick <-chan time.Time
	if c.d.opts.KeepAliveInterval > 0 {
		t := time.NewTicker(c.d.opts.KeepAliveInterval)
		defer t.Stop()
		tick = t.C
	}
	if c.d.opts.IdleClose > 0 {
		// Closed between IdleClose and 1.25 × IdleClose after the last use.
		t := time.NewTicker(min(max(c.d.opts.IdleClose/4, 5*time.Millisecond), 30*time.Second))
		defer t.Stop()
		idleTick = t.C
	}
	for {
		select {
		case <-idleTick:
			if c.goIdle(client) {
				client.Close()
				<-dead
				return errIdle
			}
		case err := <-dead:
			if err == nil {
				err = io.EOF
			}
			return err
		case <-c.ctx.Done():
			client.Close()
			<-dead
			return c.ctx.Err()
		case <-tick:
			// c.ctx cancellation makes roundTrip return early; the
			// branch above then closes the client, ending its goroutine.
			if err := c.roundTrip(c.ctx, client, c.d.opts.KeepAliveTimeout); err != nil {
				client.Close()
				<-dead
				return fmt.Errorf("keepalive: %w", err)
			}
		}
	}
}

// roundTrip sends keepalive@openssh.com and waits for the answer (any
// answer: OpenSSH replies "failure" to requests it does not know). A reply
// proves every message the server sent before it has arrived. On timeout
// the client is closed, which also ends the request.
func (c *conn) roundTrip(ctx context.Context, client *xssh.Client, timeout time.Duration) error {
	res := make(chan error, 1)
	go func() {
		_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
		res <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-res:
		return err
	case <-t.C:
		client.Close()
		<-res
		return fmt.Errorf("no answer within %s", timeout)
	case <-ctx.Done():
		// The answer still comes (or the client dies); the goroutine
		// ends then. Closing the shared client here would cut every
		// other session for one caller's cancellation.
		return ctx.Err()
	}
}
