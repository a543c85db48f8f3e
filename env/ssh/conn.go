package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// conn is the one connection to a host that every process of an
// Environment shares. A supervising goroutine sends keepalives and, when the
// connection drops, reconnects with exponential backoff until Close. While
// it is down, Exec waits up to Options.ReconnectWait and then fails with
// env.ErrUnavailable; the remote processes are unaffected (they run under
// nohup with their output in files).
type conn struct {
	d        *dialer
	log      *slog.Logger
	sessions chan struct{} // one token per open session: the server's MaxSessions

	shells map[*nohup.Shell]struct{} // resident shells open on the current client (guarded by mu)

	ctx    context.Context // done once Close is called
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wake asks the supervisor of an idle connection to dial again.
	wake chan struct{}

	mu      sync.Mutex
	client  *xssh.Client // nil while down, idle or after Close
	downErr error        // why client is nil (for an idle one: its last dial failed)
	closed  bool
	// idle: closed after Options.IdleClose without use; dialled again on
	// the next use, not in the background. idleFails counts the dials on
	// demand that failed, so that a waiter knows its dial was tried.
	idle      bool
	idleGen   int // idle periods so far
	idleFails int
	since     time.Time     // when client, idle or downErr last changed
	busy      int           // Exec calls and resident-shell calls under way
	lastUse   time.Time     // when the last of them started or ended
	changed   chan struct{} // closed and replaced at every change of the above

	checking atomic.Bool // a health check's keepalive awaits its reply
}

// newConn dials once, synchronously, so that Open reports an unreachable
// host, an unknown host key or a rejected key at once, then supervises.
func newConn(ctx context.Context, d *dialer) (*conn, error) {
	client, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		d:        d,
		log:      d.log,
		sessions: make(chan struct{}, d.opts.MaxSessions),
		ctx:      cctx,
		cancel:   cancel,
		client:   client,
		changed:  make(chan struct{}),
		wake:     make(chan struct{}, 1),
		since:    time.Now(),
		lastUse:  time.Now(),
		shells:   map[*nohup.Shell]struct{}{},
	}
	c.wg.Add(1)
	go c.supervise(client)
	return c, nil
}

// connState is a snapshot of the connection's state.
type connState struct {
	client    *xssh.Client
	downErr   error
	closed    bool
	idle      bool
	idleGen   int
	idleFails int
	changed   <-chan struct{}
}

func (c *conn) state() connState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return connState{c.client, c.downErr, c.closed, c.idle, c.idleGen, c.idleFails, c.changed}
}

// use counts an Exec or a call on a resident shell under way until the returned func is
// called; a connection in use is never closed for idleness.
func (c *conn) use() func() {
	c.mu.Lock()
	c.busy++
	c.lastUse = time.Now()
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.busy--
		c.lastUse = time.Now()
		c.mu.Unlock()
	}
}

// goIdle takes client out of use if nothing has used the connection for
// Options.IdleClose. It decides under the lock that use takes, so no call
// can pick client up once it returns true.
func (c *conn) goIdle(client *xssh.Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.client != client || c.busy > 0 || time.Since(c.lastUse) < c.d.opts.IdleClose {
		return false
	}
	c.client, c.downErr, c.idle, c.since = nil, nil, true, time.Now()
	c.idleGen++
	c.notifyLocked()
	return true
}

// wakeUp asks the supervisor of an idle connection to dial.
func (c *conn) wakeUp() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// connStatus describes the connection (env.ConnReporter).
func (c *conn) connStatus() env.ConnStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := env.ConnStatus{Since: c.since, InUse: c.busy}
	switch {
	case c.closed:
		st.State = env.ConnClosed
	case c.client != nil:
		st.State = env.ConnConnected
		if c.d.opts.IdleClose > 0 && c.busy == 0 {
			st.IdleCloseAt = c.lastUse.Add(c.d.opts.IdleClose)
		}
	case c.idle:
		st.State = env.ConnIdle
		if c.downErr != nil {
			st.Detail = "last dial failed: " + c.downErr.Error()
		}
	default:
		st.State = env.ConnReconnecting
		if c.downErr != nil {
			st.Detail = c.downErr.Error()
		}
	}
	return st
}

// health is Transport.Health. The keepalive is sent on the live client
// and waited for within ctx: a check that gets no answer in time reports
// the host unreachable and leaves the client to the keepalive's own
// timeout (KeepAliveTimeout), after which it is closed, as the
// supervisor's keepalive would close it.
func (c *conn) health(ctx context.Context) env.Health {
	c.mu.Lock()
	client, closed, idle, downErr := c.client, c.closed, c.idle, c.downErr
	c.mu.Unlock()
	switch {
	case closed:
		return env.Health{Condition: env.ConditionUnreachable, Detail: "the connection was closed"}
	case client == nil && idle && downErr == nil:
		return env.Health{Condition: env.ConditionOK}
	case client == nil && idle:
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("the last dial of %s failed: %.160v", c.d.name, downErr)}
	case client == nil:
		detail := fmt.Sprintf("the connection to %s is down; reconnecting", c.d.name)
		if downErr != nil {
			detail = fmt.Sprintf("%s: %.160v", detail, downErr)
		}
		return env.Health{Condition: env.ConditionUnreachable, Detail: detail}
	}
	// One check's keepalive at a time: a silent host leaves the request
	// waiting until the client dies, and a check every second must not
	// pile them up.
	if !c.checking.CompareAndSwap(false, true) {
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("%s does not answer: the last check's keepalive has no reply yet", c.d.name)}
	}
	res := make(chan error, 1)
	go func() {
		defer c.checking.Store(false)
		res <- c.roundTrip(c.ctx, client, c.d.opts.KeepAliveTimeout)
	}()
	select {
	case err := <-res:
		if err != nil {
			return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("%s: keepalive failed: %.160v", c.d.name, err)}
		}
		return env.Health{Condition: env.ConditionOK}
	case <-ctx.Done():
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("%s does not answer: no reply to a keepalive in time", c.d.name)}
	}
}

// notifyLocked wakes everyone waiting for a change; c.mu must be held.
func (c *conn) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// permanent reports whether a reconnect failed for a reason retrying
// cannot fix: callers must see it rather than "unavailable".
func permanent(err error) bool {
	var hke *HostKeyError
	var ae *AuthError
	return errors.As(err, &hke) || errors.As(err, &ae)
}

// downError is the error for a call made while the connection is down.
func (c *conn) downError(err error) error {
	if permanent(err) {
		return fmt.Errorf("ssh: %s: reconnect refused: %w", c.d.name, err)
	}
	return fmt.Errorf("ssh: %s: %w: connection down, reconnecting: %v", c.d.name, env.ErrUnavailable, err)
}

// waitUp blocks until a connection is established or ctx is done.
func (c *conn) waitUp(ctx context.Context) error {
	for {
		st := c.state()
		switch {
		case st.closed:
			return fmt.Errorf("ssh: %s: %w", c.d.name, env.ErrReleased)
		case st.client != nil, st.idle:
			// An idle connection is dialled by the next call.
			return nil
		}
		select {
		case <-st.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// kick closes a client an Exec saw fail, so the supervisor reconnects
// without waiting for the keepalive to notice. Closing a client that was
// already replaced is harmless.
func (c *conn) kick(client *xssh.Client) {
	client.Close()
}

func (c *conn) setDown(err error) {
	c.mu.Lock()
	c.client = nil
	c.downErr = err
	c.since = time.Now()
	c.notifyLocked()
	c.mu.Unlock()
	// Their sessions died with the connection.
	c.stopShells()
}

func (c *conn) setUp(client *xssh.Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.client = client
	c.downErr = nil
	c.idle = false
	c.since = time.Now()
	// The idle clock starts again: a connection dialled for a call must
	// not be closed before that call had a chance to use it.
	c.lastUse = time.Now()
	c.notifyLocked()
	return true
}

// Close closes the connection and stops reconnecting. Idempotent.
func (c *conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	client := c.client
	c.client = nil
	c.notifyLocked()
	c.mu.Unlock()
	c.cancel()
	c.stopShells()
	if client != nil {
		client.Close()
	}
	c.wg.Wait()
	return nil
}
