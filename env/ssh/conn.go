package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
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

// openSession opens a session on the live connection. When the
// connection is down, or turns out dead when the session is opened, the
// script has not been sent, so waiting is safe: it waits up to
// Options.ReconnectWait for the supervisor to reconnect before giving up
// with env.ErrUnavailable. A reconnect refused for good (host key, keys)
// is returned as soon as it is known.
func (c *conn) openSession(ctx context.Context) (*xssh.Client, *xssh.Session, error) {
	var timeout <-chan time.Time
	if c.d.opts.ReconnectWait > 0 {
		t := time.NewTimer(c.d.opts.ReconnectWait)
		defer t.Stop()
		timeout = t.C
	}
	var dead *xssh.Client // a client that failed; wait for its successor
	var lastErr error
	// The dial on demand this call asked for: in which idle period, and
	// how many had failed before it.
	woke, wokeGen, failsBefore := false, 0, 0
	for {
		if err := ctx.Err(); err != nil {
			// Checked before anything is sent: a cancelled Exec never
			// runs its script.
			return nil, nil, fmt.Errorf("ssh: %s: exec: %w", c.d.name, err)
		}
		st := c.state()
		switch {
		case st.closed:
			return nil, nil, fmt.Errorf("ssh: %s: %w", c.d.name, env.ErrReleased)
		case st.client != nil && st.client != dead:
			sess, err := c.newSession(ctx, st.client)
			if err == nil {
				return st.client, sess, nil
			}
			var oce *xssh.OpenChannelError
			switch {
			case ctx.Err() != nil:
				return nil, nil, fmt.Errorf("ssh: %s: open session: %w", c.d.name, ctx.Err())
			case errors.As(err, &oce):
				return nil, nil, fmt.Errorf("ssh: %s: open session: %w: %w", c.d.name, env.ErrUnavailable, err)
			}
			dead, lastErr = st.client, fmt.Errorf("connection lost: %w", err)
		case st.idle:
			// Dialled for this call, within the dial's own timeouts
			// (ConnectTimeout, HandshakeTimeout) rather than
			// ReconnectWait: nothing is wrong with an idle connection.
			if woke && st.idleGen == wokeGen && st.idleFails > failsBefore {
				return nil, nil, fmt.Errorf("ssh: %s: connect again after idle close: %w", c.d.name, st.downErr)
			}
			if !woke || st.idleGen != wokeGen {
				woke, wokeGen, failsBefore = true, st.idleGen, st.idleFails
				c.wakeUp()
			}
			select {
			case <-st.changed:
				continue
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("ssh: %s: waiting for the connection: %w", c.d.name, ctx.Err())
			}
		case st.client == nil:
			if permanent(st.downErr) {
				return nil, nil, c.downError(st.downErr)
			}
			lastErr = st.downErr
		}
		if timeout == nil {
			return nil, nil, c.downError(lastErr)
		}
		select {
		case <-st.changed:
		case <-timeout:
			return nil, nil, c.downError(lastErr)
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("ssh: %s: waiting for the connection: %w", c.d.name, ctx.Err())
		}
	}
}

// newSession opens a session, retrying for a while when the server
// refuses the channel. OpenSSH frees a session's slot only in the main-loop
// pass after both sides sent CHANNEL_CLOSE, so an open that follows a
// close closely can find all MaxSessions slots still taken; the refusal
// is transient. Any other error means the connection is broken.
func (c *conn) newSession(ctx context.Context, client *xssh.Client) (*xssh.Session, error) {
	delay := 2 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		sess, err := c.openChannel(ctx, client)
		if err == nil {
			return sess, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var oce *xssh.OpenChannelError
		if !errors.As(err, &oce) {
			c.kick(client)
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("server keeps refusing sessions (is its MaxSessions below Options.MaxSessions=%d?): %w", c.d.opts.MaxSessions, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// openChannel opens a session with a deadline of its own. x/crypto waits
// for the server's answer without one, and a half-dead server (its
// connection process alive, the rest gone) never answers: that hung a
// whole test binary for ten minutes. No answer within KeepAliveTimeout
// means the connection is dead; closing the client fails the open, and the
// caller waits for the reconnect as for any lost connection.
func (c *conn) openChannel(ctx context.Context, client *xssh.Client) (*xssh.Session, error) {
	type opened struct {
		sess *xssh.Session
		err  error
	}
	res := make(chan opened, 1)
	go func() {
		sess, err := client.NewSession()
		res <- opened{sess, err}
	}()
	closeLate := func() {
		if r := <-res; r.sess != nil {
			_ = r.sess.Close()
		}
	}
	timeout := c.d.opts.KeepAliveTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-res:
		return r.sess, r.err
	case <-t.C:
		client.Close()
		// Not waited for: x/crypto (v0.58) can block NewSession for ever
		// when the connection died between registering the channel and
		// its reader's exit (mux.openChannel waits on a channel nobody
		// closes any more); Close does not free it. Waiting here hung a
		// whole test binary in CI. That goroutine leaks instead, once
		// per such race.
		go closeLate()
		return nil, fmt.Errorf("no answer to a session open within %s", timeout)
	case <-ctx.Done():
		// The answer still comes, or the client dies; a session that
		// opens after all is closed unused.
		go closeLate()
		return nil, ctx.Err()
	}
}

// Exec implements nohup.Transport: it runs script as /bin/sh -c script on
// the host over a new session of the shared connection, waiting for a
// session slot first (the server's MaxSessions).
//
// A session that ends with an exit status is confirmed by a keepalive
// round trip before its code is trusted: OpenSSH may send exit-status
// before the last output, and a connection that drops in between would
// otherwise look like a complete, successful run with truncated output.
//
// Stdin is copied until it returns EOF or the remote side stops reading;
// Exec waits for that copy, as os/exec does.
func (c *conn) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	defer c.use()()
	select {
	case c.sessions <- struct{}{}:
	case <-ctx.Done():
		return -1, fmt.Errorf("ssh: %s: wait for a free session: %w", c.d.name, ctx.Err())
	}
	// The slot is held until the server has closed the session, which
	// after a cancellation may be later than Exec returns.
	releaseSlot := func() { <-c.sessions }

	unavailable := func(what string, err error) (int, error) {
		return -1, fmt.Errorf("ssh: %s: %s: %w: %w", c.d.name, what, env.ErrUnavailable, err)
	}
	client, sess, err := c.openSession(ctx)
	if err != nil {
		releaseSlot()
		return -1, err
	}

	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	sess.Stdout = stdout
	sess.Stderr = stderr
	stdinDone := make(chan struct{})
	if stdin != nil {
		w, err := sess.StdinPipe()
		if err != nil {
			sess.Close()
			releaseSlot()
			return unavailable("stdin", err)
		}
		go func() {
			defer close(stdinDone)
			// A write error means the script stopped reading or the
			// session ended; the exit status says what happened.
			_, _ = io.Copy(w, stdin)
			w.Close()
		}()
	} else {
		close(stdinDone)
	}
	if err := sess.Start(remoteCommand(script)); err != nil {
		sess.Close()
		<-stdinDone
		releaseSlot()
		c.kick(client)
		return unavailable("start", err)
	}
	waited := make(chan error, 1)
	go func() {
		err := sess.Wait()
		sess.Close()
		waited <- err
	}()
	select {
	case err = <-waited:
		<-stdinDone
		releaseSlot()
	case <-ctx.Done():
		// Best effort: OpenSSH delivers "signal" requests to the
		// session's process; a script that already forked keeps its
		// children until they end. Not waiting for them keeps Exec
		// bounded by ctx.
		_ = sess.Signal(xssh.SIGKILL)
		sess.Close()
		go func() {
			<-waited
			<-stdinDone
			releaseSlot()
		}()
		return -1, fmt.Errorf("ssh: %s: exec: %w", c.d.name, ctx.Err())
	}

	code := 0
	var exitErr *xssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitStatus()
	default:
		// ExitMissingError, EOF, reset: the connection died under the
		// session, so the script's fate is unknown.
		var missing *xssh.ExitMissingError
		if !errors.As(err, &missing) {
			c.kick(client)
		}
		return unavailable("exec", err)
	}
	if err := c.roundTrip(ctx, client, c.d.opts.KeepAliveTimeout); err != nil {
		if ctx.Err() != nil {
			return -1, fmt.Errorf("ssh: %s: exec: %w", c.d.name, ctx.Err())
		}
		return unavailable("confirm end of output", err)
	}
	return code, nil
}

// openShell implements nohup.ShellTransport: script runs in a session of
// the shared connection, which it keeps, one of Options.MaxSessions, so
// that the engine's calls cost one request on an open channel instead of
// a new session, a new shell and parsing its library. It fails fast rather
// than wait: without a free session slot or a live connection the engine
// runs the call through Exec, which knows how to wait for both. The shells
// end with the connection (a drop, an idle close, Close).
func (c *conn) openShell(ctx context.Context, script string) (*nohup.Shell, error) {
	select {
	case c.sessions <- struct{}{}:
	default:
		return nil, errors.New("no free session slot")
	}
	releaseSlot := func() { <-c.sessions }
	st := c.state()
	if st.closed || st.client == nil {
		releaseSlot()
		return nil, errors.New("connection down")
	}
	sess, err := c.openChannel(ctx, st.client)
	if err != nil {
		releaseSlot()
		return nil, fmt.Errorf("open session: %w", err)
	}
	stdin, err1 := sess.StdinPipe()
	stdout, err2 := sess.StdoutPipe()
	stderr, err3 := sess.StderrPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		sess.Close()
		releaseSlot()
		return nil, err
	}
	if err := sess.Start(remoteCommand(script)); err != nil {
		sess.Close()
		releaseSlot()
		return nil, fmt.Errorf("start shell: %w", err)
	}
	sh := &nohup.Shell{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	sh.Stop = sync.OnceValue(func() error {
		// The server ends the shell when the channel closes (it reads
		// EOF). A slot the server has not freed yet is retried by
		// newSession like any transient refusal.
		sess.Close()
		releaseSlot()
		c.mu.Lock()
		delete(c.shells, sh)
		c.mu.Unlock()
		return nil
	})
	c.mu.Lock()
	if c.closed || c.client != st.client {
		c.mu.Unlock()
		_ = sh.Stop()
		return nil, errors.New("connection replaced while the shell started")
	}
	c.shells[sh] = struct{}{}
	c.mu.Unlock()
	return sh, nil
}

// stopShells ends the resident shells of the connection that went away:
// the engine finds them broken on their next call (nothing sent, so
// nothing lost) and opens new ones.
func (c *conn) stopShells() {
	c.mu.Lock()
	shells := make([]*nohup.Shell, 0, len(c.shells))
	for sh := range c.shells {
		shells = append(shells, sh)
	}
	c.mu.Unlock()
	for _, sh := range shells {
		_ = sh.Stop()
	}
}
