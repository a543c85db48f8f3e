package nohup_test

import (
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup/nohuptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCommandRenamedWithNewline runs a command that gives itself a name
// holding a newline and ") ", as any process may: /proc/PID/stat then
// spans two lines, and the engine must still find the command's fields
// (pstat in sh/proc.sh) or it calls the command lost.
func TestCommandRenamedWithNewline(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		p := start(t, e, env.Spec{Command: `printf 'x\n) y' >/proc/$$/comm || exit 9; sleep 0.3; exit 3`})
		st, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, env.Exited(3), st)
	})
}
