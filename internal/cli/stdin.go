package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/corralhq/corral/registry"
)

// copyStdin copies stdin to the process, closing its stdin at EOF. It is
// not waited for: a Read on a terminal or pipe cannot be interrupted, and
// the command ends right after Run. Once the process ended it stops at its
// next read, since every Write then fails.
func copyStdin(ctx context.Context, svc registry.Service, id string, stdin io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := stdin.Read(buf)
		if n > 0 {
			if err := svc.Write(ctx, id, buf[:n]); err != nil {
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
			if err := svc.CloseStdin(ctx, id); err != nil {
				slog.Debug("stdin: close", "id", id, "err", err)
			}
			return
		}
	}
}
