package wire

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// HCLogToSlog returns an hclog.Logger that forwards to l. go-plugin logs
// through it on the host, including every line a plugin logs (parsed from
// the plugin's stderr), so plugin logs land in corral's slog with the
// plugin's name.
func HCLogToSlog(l *slog.Logger, name string) hclog.Logger {
	return &slogHCLog{l: l, name: name, level: hclog.Trace}
}

type slogHCLog struct {
	l       *slog.Logger
	name    string
	implied []any
	level   hclog.Level
}

var _ hclog.Logger = (*slogHCLog)(nil)

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < h.level {
		return
	}
	sl := toSlogLevel(level)
	ctx := context.Background()
	if !h.l.Enabled(ctx, sl) {
		return
	}
	all := make([]any, 0, len(h.implied)+len(args)+2)
	if h.name != "" {
		all = append(all, "plugin", h.name)
	}
	all = appendArgs(all, h.name != "", h.implied)
	all = appendArgs(all, h.name != "", args)
	h.l.Log(ctx, sl, msg, all...)
}

// PathKey is the key under which a host log record carries the plugin's
// binary: go-plugin logs it as "plugin", which the host's records already
// use for the plugin's name, and a record must not hold one key twice (a
// JSON handler would emit both).
const PathKey = "plugin_path"

// appendArgs appends hclog's key-value pairs to all, renaming go-plugin's
// "plugin" key to PathKey when rename is set.
func appendArgs(all []any, rename bool, args []any) []any {
	for i, a := range args {
		if rename && i%2 == 0 && i+1 < len(args) && a == "plugin" {
			a = PathKey
		}
		all = append(all, a)
	}
	return all
}

func (h *slogHCLog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLog) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *slogHCLog) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *slogHCLog) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *slogHCLog) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *slogHCLog) IsError() bool { return h.enabled(hclog.Error) }

func (h *slogHCLog) enabled(level hclog.Level) bool {
	return level >= h.level && h.l.Enabled(context.Background(), toSlogLevel(level))
}

func (h *slogHCLog) ImpliedArgs() []any { return h.implied }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(append([]any(nil), h.implied...), args...)
	return &c
}

func (h *slogHCLog) Name() string { return h.name }

// Named keeps the plugin's name: go-plugin names its sub-loggers after the
// binary path, which says less than the backend name.
func (h *slogHCLog) Named(string) hclog.Logger { c := *h; return &c }

func (h *slogHCLog) ResetNamed(name string) hclog.Logger { c := *h; c.name = name; return &c }

func (h *slogHCLog) SetLevel(level hclog.Level) { h.level = level }
func (h *slogHCLog) GetLevel() hclog.Level      { return h.level }

func (h *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		h.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// SlogToHCLog returns an slog.Handler writing through l. A plugin's slog
// records thus reach the host as hclog JSON lines on stderr, where go-plugin
// parses them back into levelled, structured entries.
func SlogToHCLog(l hclog.Logger) slog.Handler { return &hclogHandler{l: l} }

type hclogHandler struct {
	l      hclog.Logger
	attrs  []any
	prefix string
}

func (h *hclogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return h.l.GetLevel() <= fromSlogLevel(level)
}

func fromSlogLevel(level slog.Level) hclog.Level {
	switch {
	case level < slog.LevelDebug:
		return hclog.Trace
	case level < slog.LevelInfo:
		return hclog.Debug
	case level < slog.LevelWarn:
		return hclog.Info
	case level < slog.LevelError:
		return hclog.Warn
	default:
		return hclog.Error
	}
}

func (h *hclogHandler) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = appendAttr(args, h.prefix, a)
		return true
	})
	h.l.Log(fromSlogLevel(r.Level), r.Message, args...)
	return nil
}

func appendAttr(args []any, prefix string, a slog.Attr) []any {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			args = appendAttr(args, prefix+a.Key+".", g)
		}
		return args
	}
	return append(args, prefix+a.Key, v.Any())
}

func (h *hclogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]any(nil), h.attrs...)
	for _, a := range attrs {
		c.attrs = appendAttr(c.attrs, h.prefix, a)
	}
	return &c
}

func (h *hclogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}
