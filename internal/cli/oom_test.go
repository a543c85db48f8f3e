package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// TestExitForOOM: run and wait exit as the shell would (137) and say, in
// one line, that the OOM killer ended the process and what to do; a plain
// SIGKILL only sets the code.
func TestExitForOOM(t *testing.T) {
	oom := registry.Info{ID: "proc_0123456789ab", State: registry.StateExited, Reason: registry.ReasonOutOfMemory,
		Status: &env.ExitStatus{Code: -1, Signal: env.SIGKILL, OOMKilled: true}}
	err := exitForInfo(oom)
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 137, ee.code)
	assert.Equal(t, "proc_0123456789ab ran out of memory: the kernel's OOM killer ended it (killed by SIGKILL); raise its memory limit or make it use less", ee.msg)

	plain := registry.Info{ID: "proc_0123456789ab", State: registry.StateExited, Status: &env.ExitStatus{Code: -1, Signal: env.SIGKILL}}
	require.ErrorAs(t, exitForInfo(plain), &ee)
	assert.Equal(t, 137, ee.code)
	assert.Empty(t, ee.msg)
	assert.NoError(t, exitForInfo(registry.Info{Status: &env.ExitStatus{}}))
}
