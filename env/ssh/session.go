package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

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
