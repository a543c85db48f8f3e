package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// BenchmarkWaitListening measures how long after a process inside the
// container starts listening WaitListening returns: the port-open-ms
// median and p90. The moment the socket appears is seen from the host,
// which reads the container's /proc/net/tcp6 every half millisecond
// (through its PID 1's /proc entry), so the figure is free of start-up
// costs and clock skew. The process waits a little first, as a server
// does, so that the wait is in place when the port opens.
func BenchmarkWaitListening(b *testing.B) {
	cli := requireEngine(b)
	name := startPlainContainer(b, cli)
	ctx := context.Background()
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	require.NoError(b, err)
	tcp6 := fmt.Sprintf("/proc/%d/net/tcp6", res.Container.State.Pid)
	if _, err := os.ReadFile(tcp6); err != nil {
		b.Skipf("the container's sockets are not readable from here: %v", err)
	}
	e := openForBench(b, SchemeContainer+name)
	var lat []time.Duration
	port := 7100
	for b.Loop() {
		port++
		opened := make(chan time.Time, 1)
		stop := make(chan struct{})
		row := fmt.Appendf(nil, ":%04X 00000000000000000000000000000000:0000 0A ", port)
		go func() {
			t := time.NewTicker(500 * time.Microsecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					opened <- time.Time{}
					return
				case <-t.C:
				}
				if data, err := os.ReadFile(tcp6); err == nil && bytes.Contains(data, row) {
					opened <- time.Now()
					return
				}
			}
		}()
		p, err := e.Start(ctx, env.Spec{Command: "sleep 0.5; exec nc -l -p " + strconv.Itoa(port)})
		require.NoError(b, err)
		if _, err := p.(env.PortWaiter).WaitListening(ctx, []int{port}); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		seen := time.Now()
		close(stop)
		at := <-opened
		if at.IsZero() {
			require.FailNow(b, "WaitListening returned before the host saw the socket")
		}
		lat = append(lat, seen.Sub(at))
		b.StopTimer()
		_ = p.Signal(ctx, env.SIGKILL)
		_, _ = p.Wait(ctx)
		_ = p.Remove(ctx)
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "port-open-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10])/float64(time.Millisecond), "p90-ms")
}

// BenchmarkListeners times one Process.Listeners (a resident shell's
// call: the tree, its sockets and their holders) on a process that
// listens.
func BenchmarkListeners(b *testing.B) {
	cli := requireEngine(b)
	name := startPlainContainer(b, cli)
	ctx := context.Background()
	e := openForBench(b, SchemeContainer+name)
	p, err := e.Start(ctx, env.Spec{Command: "exec nc -l -p 7200"})
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Signal(ctx, env.SIGKILL); _, _ = p.Wait(ctx) })
	if _, err := p.(env.PortWaiter).WaitListening(ctx, []int{7200}); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	for b.Loop() {
		ls, err := p.(env.PortLister).Listeners(ctx)
		if err != nil || len(ls) != 1 {
			require.FailNow(b, fmt.Sprintf("Listeners: %v %v", ls, err))
		}
	}
}

// BenchmarkTreeListeners times finding the listening ports of twenty
// processes in one container, each a server, as a listing with ports
// does:
//
//	corral    one Env.TreeListeners call (one round trip for all of them)
//	baseline  twenty Process.Listeners calls, eight at a time (what a
//	          listing did before: one look per process)
func BenchmarkTreeListeners(b *testing.B) {
	cli := requireEngine(b)
	name := startPlainContainer(b, cli)
	ctx := context.Background()
	e := openForBench(b, SchemeContainer+name)
	const n = 20
	procs := make([]env.Process, n)
	for i := range procs {
		p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("exec nc -l -p %d", 7300+i)})
		require.NoError(b, err)
		b.Cleanup(func() { _ = p.Signal(ctx, env.SIGKILL); _, _ = p.Wait(ctx) })
		if _, err := p.(env.PortWaiter).WaitListening(ctx, []int{7300 + i}); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		procs[i] = p
	}
	check := func(b *testing.B, ls [][]env.Listener) {
		for i := range ls {
			if len(ls[i]) != 1 || ls[i][0].Port != 7300+i {
				require.FailNow(b, fmt.Sprintf("process %d: listeners %v", i, ls[i]))
			}
		}
	}
	b.Run("corral", func(b *testing.B) {
		tl := e.(env.TreePortLister)
		for b.Loop() {
			ls, err := tl.TreeListeners(ctx, procs)
			require.NoError(b, err)
			check(b, ls)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			ls := make([][]env.Listener, n)
			errs := make(chan error, n)
			sem := make(chan struct{}, 8)
			for i, p := range procs {
				go func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					var err error
					ls[i], err = p.(env.PortLister).Listeners(ctx)
					errs <- err
				}()
			}
			for range procs {
				require.NoError(b, <-errs)
			}
			check(b, ls)
		}
	})
}
