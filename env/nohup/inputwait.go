package nohup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/corralhq/corral/env"
)

// Input waits. The shell (corral_inputwaits in sh/input.sh) looks at every
// tree of the call in one round trip on a resident shell, as TreeStats
// does, and answers one line per tree; this file decodes it.

var _ env.InputWatcher = (*Env)(nil)

// InputWaits implements env.InputWatcher: one call looks at every
// process of procs that is this Env's. Handles of another Env, or
// released, get nil.
func (e *Env) InputWaits(ctx context.Context, procs []env.Process) ([]*env.InputWait, error) {
	return perTree(ctx, e, procs, "input waits", "corral_inputwaits", func(p *process) []string {
		return append([]string{p.ref.Dir}, treeWords(p)...)
	}, parseInputReport)
}

// parseInputReport decodes corral_inputwaits's lines, "IDX KIND" or "IDX
// -", into each of the n trees' wait. Every tree must have its line, once.
func parseInputReport(out []byte, n int) ([]*env.InputWait, error) {
	waits := make([]*env.InputWait, n)
	seen := make([]bool, n)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %q: want two fields", trunc([]byte(line)))
		}
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 || i >= n || seen[i] {
			return nil, fmt.Errorf("line %q: tree index out of range or repeated", trunc([]byte(line)))
		}
		seen[i] = true
		switch f[1] {
		case "-":
		case env.InputLine, env.InputRaw, env.InputPassword, env.InputPipe:
			waits[i] = &env.InputWait{Kind: f[1]}
		default:
			return nil, fmt.Errorf("line %q: unknown kind", trunc([]byte(line)))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range seen {
		if !ok {
			return nil, errors.New("no line for tree " + strconv.Itoa(i) + "; the sandbox's shell may have failed midway: retry")
		}
	}
	return waits, nil
}
