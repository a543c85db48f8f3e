package integration

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkCLIPSPortsDocker times `corral ps` with twenty processes in one
// container, each listening on a port, through a warm daemon:
//
//	corral    `corral ps`: the listing and every process's ports, looked up
//	          in one round trip into the container (one look per backend,
//	          not one exec per process); each call waits out the daemon's
//	          short port cache first (untimed), so every one pays the look
//	baseline  `corral ps --ports=false`: the same listing without ports
//
// The target is corral < 100 ms (it took 1.2-1.3 s with one exec per
// process per call, against 15-35 ms without ports).
func BenchmarkCLIPSPortsDocker(b *testing.B) {
	cli := requireDocker(b)
	name := startUserContainer(b, cli)
	h := newDaemonHome(b, buildCorral(b))
	const procs = 20
	for i := range procs {
		h.mustRun("start", "--backend", "docker://"+name, "--", fmt.Sprintf("nc -l -p %d", 7100+i))
	}
	// Every port shows before anything is measured.
	deadline := time.Now().Add(time.Minute)
	for {
		out := h.mustRun("ps")
		n := 0
		for i := range procs {
			if strings.Contains(out, fmt.Sprintf(" %d ", 7100+i)) {
				n++
			}
		}
		if n == procs {
			break
		}
		if time.Now().After(deadline) {
			require.FailNow(b, fmt.Sprintf("only %d of %d ports listed after a minute:\n%s", n, procs, out))
		}
		time.Sleep(100 * time.Millisecond)
	}
	ps := func(b *testing.B, want string, args ...string) {
		cmd := exec.Command(h.bin, args...)
		cmd.Env = h.env
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), want) {
			require.FailNow(b, fmt.Sprintf("corral %s: %v\n%s", strings.Join(args, " "), err, out))
		}
	}
	b.Run("corral", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			// Past the daemon's port cache (1 s): this call looks.
			time.Sleep(1100 * time.Millisecond)
			b.StartTimer()
			ps(b, fmt.Sprintf(" %d ", 7100+procs-1), "ps")
		}
	})
	b.Run("baseline", func(b *testing.B) {
		ps(b, "nc -l -p", "ps", "--ports=false")
		for b.Loop() {
			ps(b, "nc -l -p", "ps", "--ports=false")
		}
	})
	h.mustRun("kill", "--all", "--force")
}
