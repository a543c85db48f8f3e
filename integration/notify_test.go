package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// followEvents runs `corral events -f --json` for the rest of the test and
// returns the events it prints.
func (h *daemonHome) followEvents() <-chan registry.Event {
	h.t.Helper()
	cmd := exec.Command(h.bin, "events", "-f", "--json")
	cmd.Env = h.env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(h.t, err)
	require.NoError(h.t, cmd.Start())
	evs := make(chan registry.Event, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(evs)
		dec := json.NewDecoder(out)
		for {
			var ev registry.Event
			if err := dec.Decode(&ev); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
					h.t.Logf("corral events -f: %v", err)
				}
				return
			}
			evs <- ev
		}
	}()
	h.t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	return evs
}

// serveLogHas reports whether one line of the daemon's log contains every
// one of subs.
func (h *daemonHome) serveLogHas(subs ...string) bool {
	b, err := os.ReadFile(filepath.Join(h.home, "serve.log"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// TestDaemonNotifyNeverDropped: 18 `corral start --notify` processes that
// end at once each reach `corral events -f` (SSE) and the history with
// their exit status and output tail, although their started events alone
// overflow the global rate limit; a process that was `corral wait`-ed
// reaches neither.
func TestDaemonNotifyNeverDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	const jobs = 18
	h := newDaemonHome(t, buildCorral(t))
	h.startServe("--log-level", "debug") // the registry logs when a wait is blocked
	events := h.followEvents()
	next := func(what string) registry.Event {
		t.Helper()
		select {
		case ev, ok := <-events:
			require.True(t, ok, "corral events -f ended while waiting for %s", what)
			return ev
		case <-time.After(time.Minute):
			require.FailNow(t, fmt.Sprintf("no event within a minute while waiting for %s", what))
			return registry.Event{}
		}
	}
	start := func(args ...string) string {
		t.Helper()
		id := strings.TrimSpace(h.mustRun(append([]string{"start"}, args...)...))
		require.True(t, registry.ValidID(id), "start printed %q", id)
		return id
	}
	// The stream is subscribed once it shows a process started after it.
	probe := start("--", "true")
	for ev := next("the probe"); ev.ID != probe; ev = next("the probe") {
	}

	// A notified process that a blocked `corral wait` receives.
	gate := filepath.Join(h.home, "gate")
	waited := start("--notify", "--", fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done; echo waited; exit 7", gate))
	waitCode := make(chan int, 1)
	go func() {
		cmd := exec.Command(h.bin, "wait", waited)
		cmd.Env = h.env
		cmd.Run()
		waitCode <- cmd.ProcessState.ExitCode()
	}()
	require.Eventually(t, func() bool { return h.serveLogHas("wait: blocked until the process ends", "id="+waited) },
		time.Minute, 10*time.Millisecond, "corral wait did not reach the daemon")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.Equal(t, 7, <-waitCode, "corral wait's exit code")

	want := map[string]int{}
	for i := range jobs {
		id := start("--notify", "--", fmt.Sprintf("printf 'building %d\\n\\033[32mdone %d\\033[0m\\n'; exit %d", i, i, i%5))
		want[id] = i
	}
	check := func(where string, ev registry.Event) {
		t.Helper()
		i := want[ev.ID]
		assert.True(t, ev.Notify, "%s: %s", where, ev.ID)
		if assert.NotNil(t, ev.Status, "%s: %s", where, ev.ID) {
			assert.Equal(t, i%5, ev.Status.Code, "%s: %s", where, ev.ID)
		}
		assert.Equal(t, fmt.Sprintf("building %d\ndone %d", i, i), ev.Tail, "%s: %s", where, ev.ID)
	}
	got := map[string]bool{}
	for len(got) < jobs {
		ev := next(fmt.Sprintf("the exits (%d of %d so far)", len(got), jobs))
		require.False(t, ev.Type == registry.EventExited && ev.ID == waited, "the exit corral wait received was streamed")
		if _, ok := want[ev.ID]; ok && ev.Type == registry.EventExited {
			check("events -f", ev)
			got[ev.ID] = true
		}
	}
	// Had the waited exit been streamed, it would have come before this.
	sentinel := start("--notify", "--", "exit 0")
	for {
		ev := next("the sentinel")
		require.False(t, ev.Type == registry.EventExited && ev.ID == waited, "the exit corral wait received was streamed")
		if ev.Type == registry.EventExited && ev.ID == sentinel {
			break
		}
	}

	// The history: every notified exit, not the waited one.
	var hist []registry.Event
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("events", "--json")), &hist))
	inHist := map[string]bool{}
	for _, ev := range hist {
		require.False(t, ev.Type == registry.EventExited && ev.ID == waited, "the history holds the exit corral wait received")
		if _, ok := want[ev.ID]; ok && ev.Type == registry.EventExited {
			check("events", ev)
			inHist[ev.ID] = true
		}
	}
	assert.Len(t, inHist, jobs, "notified exits in the history")
	// The text form prints the tail under the exit.
	assert.Contains(t, h.mustRun("events"), "    │ done 3\n")
}
