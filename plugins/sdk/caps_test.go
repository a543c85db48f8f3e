package sdk

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// TestScriptExit: an exit code is the script's, a signal death is 128+N,
// and a program that never ran is an error (the result is unknown).
func TestScriptExit(t *testing.T) {
	code, err := ScriptExit(exec.Command("/bin/sh", "-c", "exit 3").Run())
	require.NoError(t, err)
	require.Equal(t, 3, code)
	code, err = ScriptExit(exec.Command("/bin/sh", "-c", "kill -TERM $$").Run())
	require.NoError(t, err)
	require.Equal(t, 128+15, code)
	code, err = ScriptExit(exec.Command("/bin/sh", "-c", "true").Run())
	require.NoError(t, err)
	require.Equal(t, 0, code)
	code, err = ScriptExit(exec.Command("/nonexistent/sh").Run())
	require.Error(t, err)
	require.Equal(t, -1, code)
}

// TestStatedCapabilities: a ServeTransport plugin's stated capabilities
// replace the engine's, and the Environment keeps the engine's optional
// interfaces.
func TestStatedCapabilities(t *testing.T) {
	caps := EngineCapabilities()
	require.Equal(t, "pgroup+scan", caps.TreeKill)
	require.NotEmpty(t, caps.Notes)
	caps.TreeKill = "pid-namespace"
	caps.Notes = append(caps.Notes, "Close kills the whole namespace")
	p := Plugin{Name: "t", Capabilities: &caps}
	base := t.TempDir()
	open := p.transportEnvironment(func(context.Context, string) (nohup.Transport, nohup.Options, error) {
		return &nohuptest.Local{}, nohup.Options{BaseDir: base}, nil
	})
	e, err := open(context.Background(), "t://")
	require.NoError(t, err)
	defer e.Close()
	got := e.Capabilities()
	require.Equal(t, "pid-namespace", got.TreeKill)
	require.Contains(t, got.Notes, "Close kills the whole namespace")
	require.True(t, got.PTY)
	_, ok := e.(env.ConnReporter)
	require.True(t, ok, "the wrapper hides the engine's env.ConnReporter")

	// Nil states nothing: the engine's own.
	e2, err := Plugin{Name: "t"}.transportEnvironment(func(context.Context, string) (nohup.Transport, nohup.Options, error) {
		return &nohuptest.Local{}, nohup.Options{BaseDir: base}, nil
	})(context.Background(), "t://")
	require.NoError(t, err)
	defer e2.Close()
	require.Equal(t, EngineCapabilities(), e2.Capabilities())
}

// TestStatedCapabilitiesLoseCheckURL: a sandbox found to have no HTTP
// client turns CheckURL off in the stated capabilities too, as the engine
// does in its own.
func TestStatedCapabilitiesLoseCheckURL(t *testing.T) {
	caps := EngineCapabilities()
	require.True(t, caps.CheckURL)
	base := t.TempDir()
	open := Plugin{Name: "t", Capabilities: &caps}.transportEnvironment(func(context.Context, string) (nohup.Transport, nohup.Options, error) {
		// No curl, wget or python3 in an empty PATH.
		return &nohuptest.Local{Env: []string{"PATH=" + t.TempDir()}}, nohup.Options{BaseDir: base}, nil
	})
	e, err := open(context.Background(), "t://")
	require.NoError(t, err)
	defer e.Close()
	require.True(t, e.Capabilities().CheckURL)
	uc, ok := e.(env.URLChecker)
	require.True(t, ok, "the wrapper hides the engine's env.URLChecker")
	_, err = uc.CheckURL(context.Background(), "http://127.0.0.1:1/")
	require.ErrorIs(t, err, env.ErrUnsupported)
	require.False(t, e.Capabilities().CheckURL)
}
