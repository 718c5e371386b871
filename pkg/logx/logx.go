// Package logx builds the JSON slog loggers every service uses and defines the
// attribute keys they share.
package logx

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Attribute keys, defined once.
const (
	KeyService       = "service"
	KeyVersion       = "version"
	KeyComponent     = "component"
	KeyTenantID      = "tenant_id"
	KeyUserID        = "user_id"
	KeySessionID     = "session_id"
	KeyCorrelationID = "correlation_id"
	KeyAgent         = "agent"
	KeyRunID         = "run_id"
	KeyNodeID        = "node_id"
	KeyMethod        = "method"
	KeyCode          = "code"
	KeyDuration      = "duration"
	KeyError         = "error"
	KeyTraceID       = "trace_id"
	KeySpanID        = "span_id"
)

// Config selects the log level.
type Config struct {
	Level string
}

// RegisterFlags registers -log.level.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Level, "log.level", "info", "log level: debug, info, warn or error")
}

// Validate checks the level.
func (c Config) Validate() error {
	_, err := c.level()
	return err
}

func (c Config) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(c.Level))); err != nil {
		return 0, fmt.Errorf("log.level %q: want debug, info, warn or error", c.Level)
	}
	return l, nil
}

// New returns a JSON logger with service and version attributes that adds
// trace_id and span_id from the context of each record.
func New(w io.Writer, cfg Config, service, version string) *slog.Logger {
	lvl, err := cfg.level()
	if err != nil {
		lvl = slog.LevelInfo
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})
	return slog.New(traceHandler{h}).With(KeyService, service, KeyVersion, version)
}

// Discard returns a logger that drops everything, for tests.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Err is the attribute for an error.
func Err(err error) slog.Attr { return slog.Any(KeyError, err) }

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(KeyTraceID, sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
