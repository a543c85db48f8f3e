package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/registry"
)

// startRetries bounds how often start repeats a request whose daemon went
// away before it answered.
const startRetries = 2

// startKeyed starts opts under a new key (registry.StartOptions.Key) and,
// when the daemon goes away before it answers (it crashed during the
// start), repeats the start on the next daemon with the same key: the
// caller gets the process that started, or a new one if the dead daemon
// never confirmed it (its successor ends such a start). So a start that
// fails leaves nothing of its command running, and one that succeeds is
// tracked.
func startKeyed(ctx context.Context, c *daemon.Client, opts registry.StartOptions, stderr io.Writer) (registry.Info, error) {
	opts.Key = newStartKey()
	in, err := c.Start(ctx, opts)
	for try := 0; try < startRetries && errors.Is(err, daemon.ErrDaemonLost); try++ {
		fmt.Fprintln(stderr, "corral: the daemon went away during the start; repeating it on the next daemon")
		var rerr error
		if c, rerr = reconnect(ctx, stderr); rerr != nil {
			err = fmt.Errorf("%w, and %w", err, rerr)
			break
		}
		in, err = c.Start(ctx, opts)
		if err == nil && in.Reused {
			// The key's, not a name's: this very start, which the
			// daemon had confirmed before it went away.
			in.Reused = false
			fmt.Fprintf(stderr, "corral: the start had taken effect: %s\n", in.ID)
		}
	}
	if errors.Is(err, daemon.ErrDaemonLost) {
		return in, fmt.Errorf("%w: the next daemon ends a start it had not confirmed; start again once one runs", err)
	}
	return in, err
}

// newStartKey returns a random start key.
func newStartKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "cli-" + hex.EncodeToString(b)
}

// reconnect returns a client of the daemon after the previous one went
// away: it starts one as connect does or, with CORRAL_NO_AUTOSTART=1,
// waits up to daemonStartWait for one to answer (one a service manager
// restarts), saying so on stderr.
func reconnect(ctx context.Context, stderr io.Writer) (*daemon.Client, error) {
	if os.Getenv("CORRAL_NO_AUTOSTART") != "1" {
		c, _, err := connect(ctx, stderr)
		return c, err
	}
	paths, err := daemon.DefaultPaths()
	if err != nil {
		return nil, err
	}
	c := daemon.NewClient(paths.Socket)
	fmt.Fprintf(stderr, "corral: waiting up to %s for a corral daemon on %s (CORRAL_NO_AUTOSTART=1)\n", daemonStartWait, paths.Socket)
	deadline := time.Now().Add(daemonStartWait)
	for {
		_, err := c.Status(ctx)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, daemon.ErrNoDaemon) && !errors.Is(err, daemon.ErrDaemonLost) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no corral daemon answered on %s within %s", paths.Socket, daemonStartWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
