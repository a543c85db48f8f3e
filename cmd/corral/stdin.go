package main

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/corralhq/corral/registry"
)

// runWithStdin runs opts through reg and, when feed is set, copies stdin to
// the process, closing its stdin at EOF.
//
// registry.Run blocks until the process ends and does not hand out the ID
// earlier, so the feeder learns it from the registry's started event. The
// registry is private to this command and runs exactly one process, so the
// first started event is ours.
//
// The feeder is not waited for: a Read on a terminal or pipe cannot be
// interrupted, and the command ends right after Run. Once Run has returned
// it stops at its next read, since every Write then fails.
func runWithStdin(ctx context.Context, reg *registry.Registry, opts registry.RunOptions, feed bool, stdin io.Reader) (registry.RunResult, error) {
	if !feed {
		return reg.Run(ctx, opts)
	}
	sub := reg.Subscribe()
	feedCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		id, ok := startedID(feedCtx, sub)
		sub.Close()
		if !ok {
			return
		}
		copyStdin(feedCtx, reg, id, stdin)
	}()
	return reg.Run(ctx, opts)
}

// startedID waits for the first started event and returns its process ID.
func startedID(ctx context.Context, sub *registry.Subscription) (string, bool) {
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return "", false
		}
		if ev.Type == registry.EventStarted {
			return ev.ID, true
		}
	}
}

func copyStdin(ctx context.Context, reg *registry.Registry, id string, stdin io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := stdin.Read(buf)
		if n > 0 {
			if err := reg.Write(ctx, id, buf[:n]); err != nil {
				// The process ended or stopped reading stdin: the rest of
				// our stdin has nowhere to go.
				slog.Debug("stdin: write stopped", "id", id, "err", err)
				return
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				slog.Warn("stdin: read failed; closing the command's stdin", "err", rerr)
			}
			if err := reg.CloseStdin(ctx, id); err != nil {
				slog.Debug("stdin: close", "id", id, "err", err)
			}
			return
		}
	}
}
