package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// killResidents SIGKILLs the resident shells inside the container (and the
// subshells running their calls): every process whose command line holds
// the resident loop's name. The pattern does not match its own text.
const killResidents = `for f in $(grep -l 'corral_serv[e]' /proc/[0-9]*/cmdline 2>/dev/null); do p=${f#/proc/}; kill -9 "${p%/cmdline}" 2>/dev/null; done; true`

// TestResidentsCutMidCall kills the resident shells inside the container
// again and again while processes are started, read and waited for. Every
// call must then be retried on a new resident or through an exec, or fail
// with an error that says the backend was unavailable: never a wrong
// status or wrong output.
func TestResidentsCutMidCall(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	e, err := Open(testContext(t), SchemeContainer+name, Options{Logger: discardLogger()})
	require.NoError(t, err)
	defer e.Close()

	stop := make(chan struct{})
	var cuts sync.WaitGroup
	cuts.Add(1)
	go func() {
		defer cuts.Done()
		tr := NewTransport(cli, name, "")
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			_, _ = tr.Exec(context.Background(), killResidents, nil, nil, nil)
		}
	}()

	ctx := testContext(t)
	var ok, refused int
	for i := range 15 {
		want := fmt.Sprintf("run %d", i)
		p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("sleep 0.0%d; echo '%s'; exit %d", i%10, want, i%7)})
		if err != nil {
			assert.ErrorIs(t, err, env.ErrUnavailable, "start %d failed with an error that is not 'unavailable'", i)
			assert.Contains(t, err.Error(), "resident shell")
			refused++
			continue
		}
		st, err := p.Wait(ctx)
		require.NoError(t, err, "wait %d", i)
		assert.Equal(t, env.Exited(i%7), st, "status of run %d", i)
		r, err := p.Output(ctx, 0)
		require.NoError(t, err)
		out, err := io.ReadAll(r)
		r.Close()
		require.NoError(t, err)
		assert.Equal(t, want+"\n", string(out), "output of run %d", i)
		ok++
	}
	close(stop)
	cuts.Wait()
	t.Logf("%d runs checked, %d starts refused as unavailable", ok, refused)
	require.Greater(t, ok, 0, "no run got through the cuts")

	// Once the cuts stop, new residents serve again. Residents the last
	// cut killed are idle in the pool until a call finds them broken, and
	// a start, which is not repeated, then says so (unavailable): one
	// refusal per resident at most, never a wrong result.
	var p env.Process
	for range 5 {
		if p, err = e.Start(ctx, env.Spec{Command: "echo after"}); !errors.Is(err, env.ErrUnavailable) {
			break
		}
		t.Logf("a resident killed by the last cut: %v", err)
	}
	require.NoError(t, err)
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.True(t, st.Success())
}

// TestResidentsServeConcurrentStarts starts 50 processes at once through
// the resident shells (4 of them, the rest of the calls falling back to
// execs) and checks each one's status and output.
func TestResidentsServeConcurrentStarts(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	e, err := Open(testContext(t), SchemeContainer+name, Options{Logger: discardLogger()})
	require.NoError(t, err)
	defer e.Close()
	ctx := testContext(t)

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("echo n%d; exit %d", i, i%5)})
			if err != nil {
				errs <- fmt.Errorf("start %d: %w", i, err)
				return
			}
			st, err := p.Wait(ctx)
			if err != nil || st != env.Exited(i%5) {
				errs <- fmt.Errorf("wait %d: %v, %v", i, st, err)
				return
			}
			r, err := p.Output(ctx, 0)
			if err != nil {
				errs <- err
				return
			}
			out, err := io.ReadAll(r)
			r.Close()
			if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("n%d", i) {
				errs <- fmt.Errorf("output %d: %q, %v", i, out, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	require.NoError(t, errors.Join(all...))
}
