package nohup

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
)

var _ env.TagFinder = (*Env)(nil)

// taggedPendingWait bounds how long Tagged waits for a launch that is
// still under way inside the sandbox (its spec written, the command's or
// the wrapper's identity not yet): a supervisor that died mid-call leaves
// the call running there, and it finishes within milliseconds.
const taggedPendingWait = 2 * time.Second

// Tagged implements env.TagFinder: one call lists the process directories
// whose spec names one of tags (corral_tagged in sh/tagged.sh; Start
// writes Spec.Tag there as stag), and each becomes a handle as Attach
// makes it, from the identities the launch recorded.
func (e *Env) Tagged(ctx context.Context, tags []string) (map[string][]env.Process, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	want := make([]string, 0, len(tags))
	for _, t := range tags {
		if t != "" && env.ValidTag(t) {
			want = append(want, t)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	base, err := e.base(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(taggedPendingWait)
	for {
		out, err := e.call(ctx, "find tagged", call("corral_tagged", append([]string{base}, want...)...), true)
		if err != nil {
			return nil, err
		}
		found, pending, err := e.parseTagged(base, out)
		if err != nil || pending == 0 || time.Now().After(deadline) {
			if pending > 0 {
				e.opts.Logger.Warn("nohup: tagged processes whose launch never finished were left out", "env", e.opts.Name, "count", pending)
			}
			return found, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nohup %s: find tagged: %w", e.opts.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// parseTagged turns corral_tagged's lines into handles; pending counts
// the launches still under way.
func (e *Env) parseTagged(base string, out []byte) (map[string][]env.Process, int, error) {
	found := map[string][]env.Process{}
	pending := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "P":
			pending++
			continue
		case len(f) == 9 && f[0] == "T":
		default:
			return nil, 0, fmt.Errorf("nohup %s: find tagged: malformed line %q", e.opts.Name, trunc([]byte(line)))
		}
		r := refData{Version: 1, Dir: base + "/" + f[1], Tag: f[7], Stdin: f[8] == "1"}
		nums := []*int64{&r.PID, &r.Start, &r.WPID, &r.WStart}
		for i, s := range f[3:7] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("nohup %s: find tagged: malformed line %q", e.opts.Name, trunc([]byte(line)))
			}
			*nums[i] = n
		}
		if err := r.validate(base); err != nil {
			return nil, 0, fmt.Errorf("nohup %s: find tagged: %s: %w", e.opts.Name, r.Dir, err)
		}
		found[f[2]] = append(found[f[2]], e.newProcess(r))
	}
	return found, pending, nil
}
