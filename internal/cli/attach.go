package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
)

// defaultDetachKeys ends an attach and leaves the process running.
// Ctrl-] is telnet's escape: rarely bound by a shell, an editor's
// command mode or a REPL, where docker's Ctrl-P is a shell's history key.
const defaultDetachKeys = "ctrl-]"

// attachReplay is how much of the held output an attach shows first, cut
// to start at a line: enough for a prompt and what led to it, without
// replaying a full-screen program's whole history.
const attachReplay = 16 << 10

func newAttachCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var (
		readOnly   bool
		detachKeys string
		replay     int64
	)
	cmd := &cobra.Command{
		Use:   "attach [--read-only] [--detach-keys KEYS] ID",
		Short: "Attach this terminal to a process started with --pty",
		Long: `Attach this terminal to a running process's terminal (one started with --pty,
on any backend that has terminals): the last output is shown again, what is typed
goes to the process as keys (the terminal is switched to raw mode), and the
process's terminal follows this one's size.

` + defaultDetachKeys + ` detaches, leaving the process running (--detach-keys takes another
sequence, as ctrl-p,ctrl-q). When the process ends, attach exits with its exit code.

Several terminals may attach to one process at once: all of them see its output,
and each that is not --read-only types into it, as in a shared tmux session; a
--read-only attach only watches, and Ctrl-C ends it. A process started without
--stdin takes no keys: attach then watches only, and says so.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := parseDetachKeys(detachKeys)
			if err != nil {
				return usageErrorf("attach: --detach-keys %q: %v", detachKeys, err)
			}
			if replay < 0 {
				return usageErrorf("attach: --replay must not be negative")
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			return attach(cmd.Context(), c, args[0], attachOptions{readOnly: readOnly, keys: keys, replay: replay}, stdin, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&readOnly, "read-only", false, "watch only: send no keys")
	f.StringVar(&detachKeys, "detach-keys", defaultDetachKeys, "the key sequence that detaches (ctrl-X keys, comma-separated)")
	f.Int64Var(&replay, "replay", attachReplay, "how many bytes of the held output to show first (from a line start)")
	return cmd
}

type attachOptions struct {
	readOnly bool
	keys     []byte
	replay   int64
}

func attach(ctx context.Context, c *daemon.Client, id string, o attachOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	in, err := c.Get(ctx, id)
	if err != nil {
		return daemonError("attach", err)
	}
	if !in.PTY {
		return &exitError{code: exitCorralError, msg: fmt.Sprintf("attach: %s has no terminal (start it with --pty); corral logs -f %s follows its output", in.ID, in.ID)}
	}
	if in.State.Final() {
		return &exitError{code: exitCorralError, msg: fmt.Sprintf("attach: %s has ended; corral logs %s shows its output", in.ID, in.ID)}
	}
	typing := !o.readOnly && isTerminal(stdin)
	switch {
	case !o.readOnly && !in.Stdin:
		fmt.Fprintf(stderr, "corral: attach: %s was started without --stdin: watching only\r\n", in.ID)
		typing = false
	case !o.readOnly && !typing:
		fmt.Fprintf(stderr, "corral: attach: stdin is not a terminal: watching only\r\n")
	}

	pr, err := c.Poll(ctx, in.ID, max(0, in.OutputBytes-o.replay))
	if err != nil {
		return daemonError("attach", err)
	}
	out := pr.Output
	if int64(len(out)) >= o.replay && o.replay > 0 {
		// Cut at a line start: a cut escape sequence or character would
		// show as garbage.
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	detached := make(chan struct{})
	if typing {
		restore, ok := makeRaw(stdin)
		if ok {
			defer restore()
		}
		go copyKeys(ctx, c, in.ID, stdin, o.keys, func() { close(detached); cancel() })
		keysHint := strings.ReplaceAll(keyNames(o.keys), ",", " then ")
		fmt.Fprintf(stderr, "corral: attached to %s; %s detaches\r\n", in.ID, keysHint)
	} else {
		// Watching: Ctrl-C (the terminal is not raw) ends the watch.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		defer signal.Stop(sig)
		go func() {
			select {
			case <-sig:
				close(detached)
				cancel()
			case <-ctx.Done():
			}
		}()
		fmt.Fprintf(stderr, "corral: watching %s; Ctrl-C stops watching\r\n", in.ID)
	}
	if size, ok := terminalSize(stdout); ok && typing {
		// A size change sends SIGWINCH, on which a full-screen program
		// redraws what the replay cannot show.
		if err := c.Resize(ctx, in.ID, size); err != nil {
			slog.Debug("attach: resize", "id", in.ID, "err", err)
		}
		go followTerminalSize(ctx, c, in.ID, stdout)
	}
	if _, err := stdout.Write(out); err != nil {
		return nil
	}
	end, err := c.Follow(ctx, in.ID, pr.Next, func(ch daemon.OutputChunk) error {
		_, err := stdout.Write(ch.Data)
		return err
	})
	select {
	case <-detached:
		fmt.Fprintf(stderr, "\r\ncorral: detached from %s; it keeps running (corral attach %s)\r\n", in.ID, in.ID)
		return nil
	default:
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return daemonError("attach", err)
	}
	if end.State.Final() && end.Status != nil {
		fmt.Fprintf(stderr, "\r\ncorral: %s %s\r\n", end.ID, end.StateText())
		return exitForInfo(end)
	}
	return nil
}

// copyKeys sends what is typed to the process, until keys (the detach
// sequence) are typed, which calls detach; the bytes of a sequence that
// breaks off are sent as typed.
func copyKeys(ctx context.Context, c *daemon.Client, id string, stdin io.Reader, keys []byte, detach func()) {
	buf := make([]byte, 4<<10)
	m := detachMatcher{keys: keys}
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			send, done := m.feed(buf[:n])
			if len(send) > 0 {
				if werr := c.Write(ctx, id, send); werr != nil {
					slog.Debug("attach: write stopped", "id", id, "err", werr)
					return
				}
			}
			if done {
				detach()
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				slog.Debug("attach: read", "err", err)
			}
			return
		}
	}
}

// detachMatcher finds the detach sequence in typed bytes, holding back
// the start of a sequence until it is complete or breaks off.
type detachMatcher struct {
	keys []byte
	held int // how many of keys were typed last
}

// feed returns the bytes to send for p, and whether the sequence was
// completed (what follows it in p is dropped: the attach ends).
func (m *detachMatcher) feed(p []byte) (send []byte, done bool) {
	for _, b := range p {
		if b == m.keys[m.held] {
			m.held++
			if m.held == len(m.keys) {
				return send, true
			}
			continue
		}
		send = append(send, m.keys[:m.held]...)
		m.held = 0
		if b == m.keys[0] {
			m.held = 1
			if len(m.keys) == 1 {
				return send, true
			}
			continue
		}
		send = append(send, b)
	}
	return send, false
}

// parseDetachKeys reads "ctrl-X[,ctrl-Y...]" or single characters, as
// docker's --detach-keys does.
func parseDetachKeys(s string) ([]byte, error) {
	var keys []byte
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case len(k) == 1:
			keys = append(keys, k[0])
		case len(k) == 6 && strings.HasPrefix(strings.ToLower(k), "ctrl-"):
			ch := k[5]
			switch {
			case ch >= 'a' && ch <= 'z':
				keys = append(keys, ch-'a'+1)
			case ch >= '@' && ch <= '_':
				keys = append(keys, ch-'@')
			default:
				return nil, fmt.Errorf("%q is no control key (ctrl-a to ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, ctrl-_)", k)
			}
		default:
			return nil, fmt.Errorf("%q is neither one character nor ctrl-X", k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}

// keyNames writes keys back as parseDetachKeys reads them.
func keyNames(keys []byte) string {
	names := make([]string, len(keys))
	for i, b := range keys {
		if b < 0x20 {
			names[i] = "ctrl-" + strings.ToLower(string(rune(b+'@')))
		} else {
			names[i] = string(rune(b))
		}
	}
	return strings.Join(names, ",")
}
