package local

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

// BenchmarkListeners measures one look at a tree's listeners, as the
// registry's readiness poll makes it (a tree of four processes, one of
// them listening), per tree mechanism; and one look at the whole
// machine's, as `corral ports` makes it.
func BenchmarkListeners(b *testing.B) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		b.Skip("busybox not installed (Debian: busybox-static)")
	}
	for _, mech := range []struct {
		name    string
		disable bool
	}{{"cgroup", false}, {"scan", true}} {
		b.Run("tree/"+mech.name, func(b *testing.B) {
			e := benchEnv(b, mech.disable)
			ctx := context.Background()
			port := freePort(b)
			p, err := e.Start(ctx, env.Spec{Command: shellquote.Quote(busybox) + " httpd -f -p 127.0.0.1:" + strconv.Itoa(port) +
				" -h " + shellquote.Quote(b.TempDir()) + " & sleep 1000 & sleep 1000 & wait"})
			require.NoError(b, err)
			b.Cleanup(func() {
				_ = p.Signal(ctx, env.SIGKILL)
				_, _ = p.Wait(ctx)
				_ = p.Release()
			})
			pl := p.(env.PortLister)
			for {
				ls, err := pl.Listeners(ctx)
				require.NoError(b, err)
				if len(ls) == 1 {
					break
				}
			}
			for b.Loop() {
				ls, err := pl.Listeners(ctx)
				if err != nil || len(ls) != 1 {
					require.FailNow(b, fmt.Sprintf("Listeners = %v, %v", ls, err))
				}
			}
		})
	}
	b.Run("machine", func(b *testing.B) {
		e := benchEnv(b, true)
		ctx := context.Background()
		for b.Loop() {
			_, err := e.Listeners(ctx)
			require.NoError(b, err)
		}
	})
}
