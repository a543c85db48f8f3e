package ssh_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// TestConformance runs the shared suite against one real sshd. Every
// Environment has its own connection and all share one state directory on
// the host, as Environments for one host do, so re-attach works across
// them.
func TestConformance(t *testing.T) {
	t.Run("residents", func(t *testing.T) { conformance(t, 0) })
	t.Run("no-residents", func(t *testing.T) { conformance(t, -1) })
}

// conformance runs the suite with ssh.Options.Residents as given: the
// default (calls on resident shells), or off (a session per call), with
// the transport's subset of the suite.
func conformance(t *testing.T, residents int) {
	srv := sshtest.Start(t)
	base := t.TempDir() + "/state"
	var skip map[string]string
	if residents < 0 {
		skip = envtest.TransportSkip()
	}
	envtest.Run(t, envtest.Config{
		Skip: skip,
		// sshd is started by the test, on this machine, which has
		// util-linux script: the PTY cases run on a terminal there.
		PTY:            true,
		SignalBaseline: envtest.LocalSignalBaseline,
		New: func(t *testing.T) env.Environment {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			e, err := ssh.Open(ctx, srv.Target(), ssh.Options{
				ConfigFile:      "none",
				Home:            t.TempDir(),
				KnownHostsFiles: []string{srv.KnownHosts},
				IdentityFiles:   []string{srv.ClientKey},
				AgentSocket:     "none",
				BaseDir:         base,
				Residents:       residents,
			})
			if err != nil {
				require.FailNow(t, fmt.Sprintf("ssh.Open(%s): %v\nsshd log:\n%s", srv.Target(), err, srv.Log()))
			}
			return e
		},
	})
}
