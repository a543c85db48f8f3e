package nohup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
)

// Stats. The shell (corral_treestats in sh/stats.sh) finds every tree of
// the call as TreeListeners does (t_members: the command's group while it
// runs, and the tagged processes) and sums each tree's /proc figures; this
// file decodes its one line per tree.

var _ env.TreeStatter = (*Env)(nil)

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, which Linux
// fixes at 100 on every architecture (the kernel converts its own HZ for
// /proc so that user space may rely on it), in the sandbox as on the host.
const clockTick = time.Second / 100

// TreeStats implements env.TreeStatter: one call (corral_treestats)
// measures the tree of every process of procs that is this Env's. Handles
// of another Env, or released, and trees with no live member get nil.
func (e *Env) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	return perTree(ctx, e, procs, "tree stats", "corral_treestats", treeWords, parseStatsReport)
}

// parseStatsReport decodes corral_treestats's lines, "IDX CPU RSS PIDS
// READ WRITE IOOK", into each of the n trees' figures: nil for a tree with
// no live process. Every tree must have its line, once: the report comes
// from the engine's own script, and a short one is not taken for trees
// that are gone.
func parseStatsReport(out []byte, n int) ([]*env.TreeStats, error) {
	trees := make([]*env.TreeStats, n)
	seen := make([]bool, n)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		bad := func(err error) ([]*env.TreeStats, error) {
			return nil, fmt.Errorf("line %q: %w", trunc([]byte(line)), err)
		}
		f := strings.Fields(line)
		if len(f) != 7 {
			return bad(errors.New("want seven fields"))
		}
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 || i >= n {
			return bad(fmt.Errorf("tree index %q out of range", f[0]))
		}
		if seen[i] {
			return bad(errors.New("second line for the tree"))
		}
		seen[i] = true
		var v [5]int64
		for k := range v {
			v[k], err = strconv.ParseInt(f[k+1], 10, 64)
			if err != nil || v[k] < 0 {
				return bad(fmt.Errorf("field %d (%q) is not a count", k+2, f[k+1]))
			}
		}
		if f[6] != "0" && f[6] != "1" {
			return bad(errors.New("io flag is not 0 or 1"))
		}
		if v[2] == 0 {
			continue // no live member: the tree is gone
		}
		s := &env.TreeStats{
			CPU:        time.Duration(v[0]) * clockTick,
			RSS:        v[1] * 1024,
			Pids:       int(v[2]),
			ReadBytes:  v[3],
			WriteBytes: v[4],
		}
		if f[6] == "0" {
			s.Missing = []string{"io"}
		}
		trees[i] = s
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("no line for tree %d of %d; the sandbox's shell may have failed midway: retry", i, n)
		}
	}
	return trees, nil
}
