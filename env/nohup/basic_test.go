package nohup_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

func TestExitStatus(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		cases := []struct {
			cmd  string
			want env.ExitStatus
		}{
			{"exit 0", env.Exited(0)},
			{"exit 3", env.Exited(3)},
			{"exit 143", env.Exited(143)},
			{"exit 137", env.Exited(137)},
			{"kill -TERM $$", env.Signaled(env.SIGTERM)},
			{"kill -KILL $$", env.Signaled(env.SIGKILL)},
			{"echo hi; kill -INT $$; sleep 5", env.Signaled(env.SIGINT)},
		}
		for _, c := range cases {
			p := start(t, e, env.Spec{Command: c.cmd})
			got, err := p.Wait(testCtx(t))
			require.NoErrorf(t, err, "%q: Wait", c.cmd)
			assert.Truef(t, got == c.want, "%q: got %v, want %v", c.cmd, got, c.want)
		}
	})
}
