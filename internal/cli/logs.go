package cli

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
)

func newLogsCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		follow bool
		tail   int
		since  int64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "logs [-f] [--tail N] [--since-byte N] ID",
		Short: "Print a background process's output (merged stdout and stderr)",
		Long: `Print the output the daemon holds for the process: the first 64 KiB and the
last part of at most 1 MiB, with a note on stderr where bytes were omitted.
--since-byte N prints only what came after output byte N (the total so far is
"output_bytes" in ps --json). -f follows the output until the process ends.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tail < 0 || since < 0 {
				return usageErrorf("logs: --tail and --since-byte must not be negative")
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pr, err := c.Poll(ctx, args[0], since)
			if err != nil {
				return daemonError("logs", err)
			}
			if asJSON && !follow {
				return printJSON(stdout, pr)
			}
			out := pr.Output
			if tail > 0 {
				out = lastLines(out, tail)
			} else if pr.OmittedBytes > 0 {
				fmt.Fprintf(stderr, "corral: %d bytes of output were omitted (they no longer fit the buffer)\n", pr.OmittedBytes)
			}
			if asJSON {
				printChunkJSON(stdout, daemon.OutputChunk{Offset: pr.Next - int64(len(out)), Data: out})
			} else if _, err := stdout.Write(out); err != nil {
				return nil // stdout closed: nothing more to say
			}
			if !follow {
				return nil
			}
			notes := &omissions{w: stderr, every: time.Second, now: time.Now}
			_, err = c.Follow(ctx, pr.ID, pr.Next, func(ch daemon.OutputChunk) error {
				if asJSON {
					return printChunkJSON(stdout, ch)
				}
				notes.add(ch.Omitted)
				_, err := stdout.Write(ch.Data)
				return err
			})
			notes.flush()
			if err != nil && ctx.Err() == nil {
				return daemonError("logs", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing output until the process ends")
	f.IntVar(&tail, "tail", 0, "print only the last N lines of the held output")
	f.Int64Var(&since, "since-byte", 0, "print only output after byte offset N")
	f.BoolVar(&asJSON, "json", false, "print JSON (with -f: one object per chunk)")
	return cmd
}

// omissions coalesces the notices of output a follow left out (its
// reader fell behind a fast writer): the first is printed at once, later
// ones at most once per every, each with the bytes omitted since the
// last, and flush prints what is pending when the follow ends. A fast
// writer otherwise had logs -f print a notice per chunk (about 170 for
// one run).
type omissions struct {
	w       io.Writer
	every   time.Duration
	now     func() time.Time
	pending int64
	chunks  int
	last    time.Time
}

func (o *omissions) add(n int64) {
	if n <= 0 {
		return
	}
	o.pending += n
	o.chunks++
	if t := o.now(); o.last.IsZero() || t.Sub(o.last) >= o.every {
		o.last = t
		o.flush()
	}
}

func (o *omissions) flush() {
	if o.pending == 0 {
		return
	}
	where := "once"
	if o.chunks > 1 {
		where = fmt.Sprintf("in %d places", o.chunks)
	}
	fmt.Fprintf(o.w, "corral: %d bytes of output were omitted (%s; the reader fell behind)\n", o.pending, where)
	o.pending, o.chunks = 0, 0
}

func printChunkJSON(w io.Writer, ch daemon.OutputChunk) error {
	return printJSON(w, struct {
		Offset  int64  `json:"offset"`
		Text    string `json:"text"`
		Omitted int64  `json:"omitted,omitempty"`
	}{ch.Offset, string(ch.Data), ch.Omitted})
}

// lastLines returns the last n lines of b (a final unterminated line
// counts as one).
func lastLines(b []byte, n int) []byte {
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	i := end
	for ; n > 0 && i > 0; n-- {
		j := bytes.LastIndexByte(b[:i], '\n')
		if j < 0 {
			return b
		}
		if n == 1 {
			return b[j+1:]
		}
		i = j
	}
	return b[i:]
}
