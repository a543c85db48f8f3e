// Command testplugin is a backend plugin for corral's own tests, built as
// corral-backend-hostsh: a nohup.Transport that runs every script with the
// host's /bin/sh (no isolation at all) served with sdk.ServeTransport, and
// capabilities it states itself (sdk.Plugin.Capabilities) so that tests can
// see them cross the boundary: on Open, in `corral backends` and in
// `corral doctor`.
//
// Target: hostsh://?base=DIR, DIR being the engine's BaseDir (default: the
// engine's own).
//
// HOSTSH_TREE_STATS (set through plugins.Options.Env) asks for a test
// behaviour of env.TreeStatter, served with sdk.Serve instead (so the
// engine's own capabilities count once opened): "fixed" measures every
// live tree with figures made of its PID and size (fixedTreeStats), whether
// or not the engine measures, so that tests can check every field across
// the boundary; "none" hides the engine's TreeStats, as a backend that
// cannot measure.

//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/plugins/sdk"
)

// TreeKill and Note are what the plugin states beyond the engine's
// capabilities.
const (
	TreeKill = "pgroup+scan (hostsh)"
	Note     = "hostsh: no isolation, scripts run on the host (a test plugin)"
)

// StatsEnv names the variable that selects a TreeStats behaviour; NoIOEnv
// in a Spec's Env makes "fixed" report that tree's I/O as missing.
const (
	StatsEnv = "HOSTSH_TREE_STATS"
	NoIOEnv  = "HOSTSH_NO_IO=1"
)

func main() {
	caps := sdk.EngineCapabilities()
	caps.TreeKill = TreeKill
	caps.Notes = append(caps.Notes, Note)
	p := sdk.Plugin{
		Name:         "hostsh",
		Version:      "0.0.1-test",
		Description:  "the host's /bin/sh through ServeTransport (tests only)",
		Capabilities: &caps,
	}
	var wrap func(env.Environment) env.Environment
	switch mode := os.Getenv(StatsEnv); mode {
	case "":
		sdk.ServeTransport(p, open)
		return
	case "fixed":
		wrap = func(e env.Environment) env.Environment { return &fixedStats{Environment: e, noIO: map[int]bool{}} }
	case "none":
		wrap = func(e env.Environment) env.Environment { return hiddenStats{e} }
	default:
		fmt.Fprintf(os.Stderr, "hostsh: %s=%.20q: want fixed or none\n", StatsEnv, mode)
		os.Exit(2)
	}
	newEnv := sdk.TransportEnvironment(open)
	p.Open = func(ctx context.Context, target string) (env.Environment, error) {
		e, err := newEnv(ctx, target)
		if err != nil {
			return nil, err
		}
		return wrap(e), nil
	}
	sdk.Serve(p)
}

// fixedTreeStats is what "fixed" reports for a live tree of n processes
// whose leader is pid: every field distinct, CPU below the millisecond and
// RSS beyond 32 bits, so a lost or truncated field shows. plugins'
// stats_test.go computes the same.
func fixedTreeStats(pid, n int, noIO bool) *env.TreeStats {
	s := &env.TreeStats{CPU: time.Duration(pid)*time.Millisecond + 7, RSS: int64(pid)<<24 + 3, Pids: n,
		ReadBytes: int64(pid)*1000 + 1, WriteBytes: int64(pid)*1000 + 2}
	if noIO {
		s.ReadBytes, s.WriteBytes, s.Missing = 0, 0, []string{"io"}
	}
	return s
}

// fixedStats measures with fixedTreeStats: a tree is what the process's
// Survivors returns, as env.TreeStatter says; a released process or an
// empty tree gets nil.
type fixedStats struct {
	env.Environment
	mu   sync.Mutex
	noIO map[int]bool // by PID: started with NoIOEnv
}

func (f *fixedStats) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	p, err := f.Environment.Start(ctx, spec)
	if err == nil && slices.Contains(spec.Env, NoIOEnv) {
		f.mu.Lock()
		f.noIO[p.PID()] = true
		f.mu.Unlock()
	}
	return p, err
}

func (f *fixedStats) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	out := make([]*env.TreeStats, len(procs))
	for i, p := range procs {
		pids, err := p.Survivors(ctx)
		switch {
		case errors.Is(err, env.ErrReleased):
			continue
		case err != nil:
			return nil, err
		case len(pids) == 0:
			continue
		}
		f.mu.Lock()
		noIO := f.noIO[p.PID()]
		f.mu.Unlock()
		out[i] = fixedTreeStats(p.PID(), len(pids), noIO)
	}
	return out, nil
}

// hiddenStats is the engine's Environment without its optional
// interfaces, env.TreeStatter among them.
type hiddenStats struct{ env.Environment }

func open(_ context.Context, target string) (nohup.Transport, nohup.Options, error) {
	rest, ok := strings.CutPrefix(target, "hostsh://")
	if !ok {
		return nil, nohup.Options{}, fmt.Errorf("hostsh: target %q: want hostsh://[?base=DIR]", target)
	}
	_, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, nohup.Options{}, fmt.Errorf("hostsh: target %q: %w", target, err)
	}
	return hostShell{}, nohup.Options{Name: "hostsh://", BaseDir: q.Get("base")}, nil
}

// hostShell runs scripts with the host's /bin/sh: the host is the one
// long-lived sandbox, what a script leaves running outlives it, and the
// host's init reaps orphans.
type hostShell struct{}

func (hostShell) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// When ctx ends, end the script's shell and what it runs in its
	// process group (a follow's sleep), not what it started in a session
	// of its own (the engine's commands).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	return sdk.ScriptExit(err)
}
