package nohup_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// TestAttachUnderAnotherBaseDir: a Ref made by an Env with another BaseDir
// (a plugin restarted with a different one) is not found, with a hint to
// keep BaseDir stable, and nothing runs to say so.
func TestAttachUnderAnotherBaseDir(t *testing.T) {
	sh := dash()
	tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
	ctx := testCtx(t)
	e1, err := nohup.New(tr, nohup.Options{Name: "x", BaseDir: t.TempDir() + "/one", Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e1.Close() })
	p := start(t, e1, env.Spec{Command: "exit 3", Detach: true})
	ref, err := p.Ref()
	require.NoError(t, err)

	e2, err := nohup.New(tr, nohup.Options{Name: "x", BaseDir: t.TempDir() + "/two", Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e2.Close() })
	before := tr.Execs()
	_, err = e2.Attach(ctx, ref)
	require.ErrorIs(t, err, env.ErrNotFound)
	require.ErrorContains(t, err, "keep Options.BaseDir the same")
	require.Equal(t, before, tr.Execs(), "Attach ran a script before rejecting the ref")

	// The Env that made it still finds it.
	q, err := e1.Attach(ctx, ref)
	require.NoError(t, err)
	st, err := q.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, env.Exited(3), st)
	require.NoError(t, q.Release())
}
