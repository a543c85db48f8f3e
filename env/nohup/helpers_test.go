package nohup_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newEnv returns an Env on the local transport with shell sh and a base
// dir under t.TempDir(); it is closed when the test ends.
func newEnv(t *testing.T, sh nohuptest.Shell) (*nohup.Env, *nohuptest.Local) {
	t.Helper()
	tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
	e, err := nohup.New(tr, nohup.Options{Name: "local-" + sh.Name, BaseDir: t.TempDir() + "/state", Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e, tr
}

func forShells(t *testing.T, f func(t *testing.T, sh nohuptest.Shell)) {
	for _, sh := range nohuptest.Shells(t) {
		t.Run(sh.Name, func(t *testing.T) {
			t.Parallel()
			f(t, sh)
		})
	}
}

func start(t *testing.T, e env.Environment, spec env.Spec) env.Process {
	t.Helper()
	p, err := e.Start(testCtx(t), spec)
	require.NoErrorf(t, err, "Start(%q)", spec.Command)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if p.Signal(ctx, env.SIGKILL) == nil {
			_, _ = p.Wait(ctx)
		}
		_ = p.Release()
	})
	return p
}

func readAll(t *testing.T, p env.Process, off int64) []byte {
	t.Helper()
	r, err := p.Output(testCtx(t), off)
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err, "reading output")
	return b
}
