package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/env"
)

var _ env.TagFinder = (*Env)(nil)

// taggedPendingWait bounds how long Tagged waits for a start under way: a
// supervisor makes the process directory, then the shim server writes
// state.json (with the Spec.Tag) once the command runs, within
// milliseconds. A supervisor that died between the two leaves the
// server's half running; a directory older than this without state.json
// is one whose start never reached the server.
const taggedPendingWait = 2 * time.Second

// Tagged implements env.TagFinder for detached processes: each directory
// of the state directory whose state.json records one of tags as its
// Spec.Tag becomes a handle, as Attach makes it.
func (e *Env) Tagged(ctx context.Context, tags []string) (map[string][]env.Process, error) {
	want := map[string]bool{}
	for _, t := range tags {
		if t != "" && env.ValidTag(t) {
			want[t] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	found := map[string][]env.Process{}
	seen := map[string]bool{} // directories whose state was read
	var errs []error
	deadline := time.Now().Add(taggedPendingWait)
	for {
		entries, err := os.ReadDir(e.stateDir)
		if err != nil {
			return found, fmt.Errorf("local: find tagged: %w", err)
		}
		pending := false
		for _, ent := range entries {
			id := ent.Name()
			if !ent.IsDir() || !validID(id) || seen[id] {
				continue
			}
			dir := filepath.Join(e.stateDir, id)
			st, err := readState(dir)
			if err != nil {
				if fi, serr := ent.Info(); serr == nil && time.Since(fi.ModTime()) < taggedPendingWait {
					pending = true
				}
				continue
			}
			seen[id] = true
			if !want[st.SpecTag] {
				continue
			}
			d, err := e.newHandle(id, dir, st)
			if err != nil {
				errs = append(errs, fmt.Errorf("local: find tagged %s: %w", id, err))
				continue
			}
			found[st.SpecTag] = append(found[st.SpecTag], d)
		}
		if !pending || time.Now().After(deadline) {
			return found, errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			for _, ps := range found {
				for _, p := range ps {
					_ = p.Release()
				}
			}
			return nil, fmt.Errorf("local: find tagged: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
