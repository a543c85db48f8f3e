package wire_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/plugins/internal/wire"
)

// recorder is a slog.Handler that keeps every record's attributes, in
// order, duplicates included.
type recorder struct {
	mu    sync.Mutex
	attrs [][]slog.Attr
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var as []slog.Attr
	rec.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	r.mu.Lock()
	r.attrs = append(r.attrs, as)
	r.mu.Unlock()
	return nil
}

// TestHCLogOnePluginKey: go-plugin logs the binary under "plugin"; the
// host's records carry the plugin's name under that key, so the path moves
// to plugin_path and no record holds a key twice.
func TestHCLogOnePluginKey(t *testing.T) {
	rec := &recorder{}
	var l hclog.Logger = wire.HCLogToSlog(slog.New(rec), "unshare")
	l.Info("plugin process exited", "plugin", "/opt/p/corral-backend-unshare", "id", 42)
	l.With("plugin", "/opt/p/corral-backend-unshare").Named("x").Warn("implied")

	require.Len(t, rec.attrs, 2)
	for _, as := range rec.attrs {
		keys := map[string]int{}
		vals := map[string]any{}
		for _, a := range as {
			keys[a.Key]++
			vals[a.Key] = a.Value.Any()
		}
		for k, n := range keys {
			assert.Equal(t, 1, n, "key %q appears %d times in %v", k, n, as)
		}
		assert.Equal(t, "unshare", vals["plugin"])
		assert.Equal(t, "/opt/p/corral-backend-unshare", vals[wire.PathKey])
	}
}
