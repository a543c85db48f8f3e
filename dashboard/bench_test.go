package dashboard

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// BenchmarkUpdateLatency measures the time from a change in the registry
// (Start returning, then a force Kill returning) to the matching
// session_updated reaching each of two connected browsers: "several
// browsers see the same state within 100 ms of a change". update-ms is the
// mean over both changes and both browsers.
func BenchmarkUpdateLatency(b *testing.B) {
	f := newFixture(b)
	var clients []*client
	for range 2 {
		c, _, err := f.dial(http.Header{"Authorization": {"Bearer " + testToken}})
		require.NoError(b, err)
		c.next(ofType("sessions"))
		clients = append(clients, c)
	}
	var total time.Duration
	var n int
	for b.Loop() {
		in, err := f.reg.Start(ctxT(b), registry.StartOptions{Command: "sleep 30"})
		require.NoError(b, err)
		changed := time.Now()
		for _, c := range clients {
			c.next(sessionState(in.ID, "running"))
			total += time.Since(changed)
			n++
		}
		_, err = f.reg.Kill(ctxT(b), in.ID, registry.KillOptions{Force: true})
		require.NoError(b, err)
		changed = time.Now()
		for _, c := range clients {
			c.next(sessionState(in.ID, "killed"))
			total += time.Since(changed)
			n++
		}
		require.NoError(b, f.reg.Remove(ctxT(b), in.ID))
	}
	b.ReportMetric(float64(total.Microseconds())/float64(n)/1000, "update-ms")
}
