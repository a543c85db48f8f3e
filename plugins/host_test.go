package plugins_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins"
	pb "github.com/corralhq/corral/plugins/proto"
)

// TestDefaultWorkDir: with no Spec.Dir a command runs in the plugin's
// default directory, which is plugins.WorkDir for a plugin that runs
// commands on the host, never the working directory of corral (here: the
// test's package directory).
func TestDefaultWorkDir(t *testing.T) {
	e := openPlugin(t, "localplugin://?state="+t.TempDir())
	t.Cleanup(func() { e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: "pwd"})
	require.NoError(t, err)
	defer p.Release()
	require.Equal(t, plugins.WorkDir+"\n", readAll(t, p))
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	require.True(t, st.Success())
}

// waitSent returns dial options that close the returned channel once the
// host has sent a Run stream's wait request.
func waitSent() ([]grpc.DialOption, <-chan struct{}) {
	sent := make(chan struct{})
	var once sync.Once
	return []grpc.DialOption{grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return &watchSend{ClientStream: s, sent: func() { once.Do(func() { close(sent) }) }}, err
	})}, sent
}

type watchSend struct {
	grpc.ClientStream
	sent func()
}

func (w *watchSend) SendMsg(m any) error {
	err := w.ClientStream.SendMsg(m)
	if r, ok := m.(*pb.RunRequest); ok && r.GetWait() && err == nil {
		w.sent()
	}
	return err
}

// TestWaitCutByCrashHasNoStatus: a Wait in flight when the plugin dies
// fails with ErrUnavailable and env.NoStatus, not a zero status that
// would read "exit status 0".
func TestWaitCutByCrashHasNoStatus(t *testing.T) {
	dial, sent := waitSent()
	e := openWith(t, plugins.WithDialOptions(testOptions(), dial...))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	marker := strconv.Itoa(10_000_000 + rand.IntN(80_000_000))
	p, err := e.Start(ctx, env.Spec{Command: "sleep " + marker})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Orphaned by the crash: the whole group (its leader is a session
		// leader), since the shell may have forked its sleep.
		syscall.Kill(-p.PID(), syscall.SIGKILL)
		syscall.Kill(p.PID(), syscall.SIGKILL)
	})

	type result struct {
		st  env.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := p.Wait(ctx)
		done <- result{st, err}
	}()
	select {
	case <-sent:
	case <-ctx.Done():
		require.FailNow(t, "the host never sent the wait request")
	}
	killPlugin(t, e)
	r := <-done
	require.ErrorIs(t, r.err, env.ErrUnavailable)
	require.Equal(t, env.NoStatus, r.st)
	require.False(t, r.st.Success())
	require.Equal(t, "no exit status", r.st.String())
}

// records is a slog.Handler keeping every record's attributes.
type records struct {
	mu   sync.Mutex
	recs []map[string][]string // key → its values, duplicates kept
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &withAttrs{r: r, as: as}
}
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	return r.handle(nil, rec)
}
func (r *records) handle(pre []slog.Attr, rec slog.Record) error {
	m := map[string][]string{"msg": {rec.Message}}
	add := func(a slog.Attr) bool { m[a.Key] = append(m[a.Key], a.Value.String()); return true }
	for _, a := range pre {
		add(a)
	}
	rec.Attrs(add)
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return nil
}

type withAttrs struct {
	r  *records
	as []slog.Attr
}

func (w *withAttrs) Enabled(context.Context, slog.Level) bool { return true }
func (w *withAttrs) WithGroup(string) slog.Handler            { return w }
func (w *withAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return &withAttrs{r: w.r, as: append(append([]slog.Attr(nil), w.as...), as...)}
}
func (w *withAttrs) Handle(_ context.Context, rec slog.Record) error { return w.r.handle(w.as, rec) }

// TestLogRecordsOnePluginKey: the host's records about a plugin carry its
// name once under "plugin"; go-plugin's binary path is "plugin_path".
func TestLogRecordsOnePluginKey(t *testing.T) {
	recs := &records{}
	opts := testOptions()
	opts.Logger = slog.New(recs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := plugins.Open(ctx, "localplugin://?state="+t.TempDir(), opts)
	require.NoError(t, err)
	require.NoError(t, e.Close()) // go-plugin logs the exit with the path
	recs.mu.Lock()
	defer recs.mu.Unlock()
	var withPath int
	for _, m := range recs.recs {
		for k, vs := range m {
			require.Len(t, vs, 1, "record %v holds key %q %d times", m, k, len(vs))
		}
		if vs, ok := m["plugin"]; ok {
			require.Equal(t, "localplugin", vs[0], "record %v", m)
		}
		if vs, ok := m["plugin_path"]; ok {
			withPath++
			require.True(t, strings.HasSuffix(vs[0], "/corral-backend-localplugin"), "record %v", m)
		}
	}
	require.NotZero(t, withPath, "no record named the plugin's binary: %s", fmt.Sprint(recs.recs))
}

// The test plugin's stated capabilities (plugins/internal/testplugin).
const (
	hostshTreeKill = "pgroup+scan (hostsh)"
	hostshNote     = "hostsh: no isolation, scripts run on the host (a test plugin)"
)

// TestStatedCapabilities: what a ServeTransport plugin states about its
// capabilities reaches the host without an Open (Probe: corral backends
// and doctor) and from the opened Environment, and the plugin works.
func TestStatedCapabilities(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := plugins.Find("hostsh", testOptions())
	require.NoError(t, err)
	info, err := plugins.Probe(ctx, f, testOptions())
	require.NoError(t, err)
	require.NotNil(t, info.Capabilities)
	require.Equal(t, hostshTreeKill, info.Capabilities.TreeKill)
	require.Contains(t, info.Capabilities.Notes, hostshNote)
	require.True(t, info.Capabilities.Reattach)

	e := openPlugin(t, "hostsh://?base="+t.TempDir()+"/state")
	t.Cleanup(func() { e.Close() })
	caps := e.Capabilities()
	require.Equal(t, hostshTreeKill, caps.TreeKill)
	require.Contains(t, caps.Notes, hostshNote)
	p, err := e.Start(ctx, env.Spec{Command: "echo hi; exit 4"})
	require.NoError(t, err)
	defer p.Release()
	require.Equal(t, "hi\n", readAll(t, p))
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, env.Exited(4), st)

	// A plugin that states nothing has no capabilities before an Open.
	f, err = plugins.Find("localplugin", testOptions())
	require.NoError(t, err)
	info, err = plugins.Probe(ctx, f, testOptions())
	require.NoError(t, err)
	require.Nil(t, info.Capabilities)
}
