package local

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
)

// inputWatchProcs and inputWatchEvery are the load the cost target is set
// for: 100 idle processes, looked at twice a second (a wait is to be
// reported within 2 s of a 1.5 s quiet spell).
const (
	inputWatchProcs = 100
	inputWatchEvery = 500 * time.Millisecond
	inputWatchSpell = 3 * time.Second
)

// idleProcs starts n idle processes, half on a terminal and half with a
// stdin pipe: sleeping, or (waiting) blocked reading their terminal or
// pipe, which are flagged and the costlier path of a look.
func idleProcs(b *testing.B, e *Env, n int, waiting bool) []env.Process {
	ctx := context.Background()
	procs := make([]env.Process, 0, n)
	want := 0
	command := "sleep 1000"
	if waiting {
		command, want = "read v", n
	}
	for i := range n {
		spec := env.Spec{Command: command, PTY: &env.DefaultWindowSize, Stdin: true}
		if i%2 == 1 {
			spec.PTY = nil
		}
		p, err := e.Start(ctx, spec)
		require.NoError(b, err)
		procs = append(procs, p)
	}
	b.Cleanup(func() {
		for _, p := range procs {
			_ = p.Signal(ctx, env.SIGKILL)
			_, _ = p.Wait(ctx)
			_ = p.Release()
		}
	})
	// Every reader is settled in its read before anything is measured.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := e.InputWaits(ctx, procs)
		require.NoError(b, err)
		flagged := 0
		for _, w := range ws {
			if w != nil {
				flagged++
			}
		}
		if flagged == want {
			return procs
		}
		if time.Now().After(deadline) {
			require.FailNow(b, fmt.Sprintf("%d flagged, want %d", flagged, want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuTime is this process's CPU time, user plus system: the reads of
// /proc are system time spent on the supervisor's account.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInputWatch is the cost of watching 100 idle processes for
// input waits, twice a second, against an idle baseline with the same
// processes in the same run: the supervisor's CPU over a spell without
// looks (idle-%core), then over a spell of looks (watch-%core), and the
// difference in percentage points of one core (cost-%core, target <= 1).
// look-us is one look at all 100. The processes sleep (sleeping) or all
// wait for input (waiting), half on a terminal, half on a stdin pipe.
//
// Where cgroups are usable they are measured (a look at a tree that has
// not run is one read of its cpu.stat), and so is the pgroup+scan
// fallback (scan/sleeping), which walks each tree's descendants at every
// look.
func BenchmarkInputWatch(b *testing.B) {
	for _, c := range []struct {
		name             string
		noCgroup, waitIn bool
	}{
		{"sleeping", !cgroupUsable(), false},
		{"waiting", !cgroupUsable(), true},
		{"scan/sleeping", true, false},
	} {
		b.Run(c.name, func(b *testing.B) { benchInputWatch(b, c.noCgroup, c.waitIn) })
	}
}

func benchInputWatch(b *testing.B, noCgroup, waiting bool) {
	e := benchEnv(b, noCgroup)
	b.Logf("tree mechanism: %s", e.Capabilities().TreeKill)
	procs := idleProcs(b, e, inputWatchProcs, waiting)
	ctx := context.Background()
	pct := func(cpu, wall time.Duration) float64 { return 100 * float64(cpu) / float64(wall) }
	var idle, watch, wall, looks, lookCPU time.Duration
	var nLooks int
	for b.Loop() {
		c0, t0 := cpuTime(b), time.Now()
		time.Sleep(inputWatchSpell)
		idleCPU, idleWall := cpuTime(b)-c0, time.Since(t0)

		c1, t1 := cpuTime(b), time.Now()
		tick := time.NewTicker(inputWatchEvery)
		for time.Since(t1) < inputWatchSpell {
			<-tick.C
			l0, lc := time.Now(), cpuTime(b)
			if _, err := e.InputWaits(ctx, procs); err != nil {
				tick.Stop()
				require.FailNow(b, err.Error())
			}
			looks += time.Since(l0)
			lookCPU += cpuTime(b) - lc
			nLooks++
		}
		tick.Stop()
		watch += cpuTime(b) - c1
		watchWall := time.Since(t1)
		wall += watchWall
		// The idle spell's CPU, scaled to the watched spell's length.
		idle += time.Duration(float64(idleCPU) * float64(watchWall) / float64(idleWall))
	}
	b.ReportMetric(pct(idle, wall), "idle-%core")
	b.ReportMetric(pct(watch, wall), "watch-%core")
	b.ReportMetric(pct(watch-idle, wall), "cost-%core")
	b.ReportMetric(float64(looks.Microseconds())/float64(nLooks), "look-us")
	b.ReportMetric(float64(lookCPU.Microseconds())/float64(nLooks), "look-cpu-us")
}

// BenchmarkInputLook is one look at 100 sleeping processes (ns/op).
func BenchmarkInputLook(b *testing.B) {
	e := benchEnv(b, !cgroupUsable())
	procs := idleProcs(b, e, inputWatchProcs, false)
	ctx := context.Background()
	for b.Loop() {
		if _, err := e.InputWaits(ctx, procs); err != nil {
			require.FailNow(b, err.Error())
		}
	}
}
