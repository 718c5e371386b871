// Package telemetry sets up OpenTelemetry tracing. Without an endpoint it
// installs only the W3C propagators, so trace context still flows through
// gRPC metadata and NATS headers.
package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Config selects the OTLP exporter.
type Config struct {
	Endpoint    string
	SampleRatio float64
}

// RegisterFlags registers -otel.endpoint and -otel.sample-ratio.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Endpoint, "otel.endpoint", "", "OTLP/gRPC endpoint (host:port) for traces; empty disables export")
	fs.Float64Var(&c.SampleRatio, "otel.sample-ratio", 1, "fraction of new traces to sample")
}

// Validate checks the sample ratio (0 to 1) and that the endpoint is a
// host:port, not a URL; the exporter reports connection problems.
func (c Config) Validate() error {
	var errs []error
	if math.IsNaN(c.SampleRatio) || c.SampleRatio < 0 || c.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("otel.sample-ratio: %v is not between 0 and 1", c.SampleRatio))
	}
	if c.Endpoint != "" {
		if strings.Contains(c.Endpoint, "://") {
			errs = append(errs, fmt.Errorf("otel.endpoint: %q: want host:port, without a scheme", c.Endpoint))
		} else if _, port, err := net.SplitHostPort(c.Endpoint); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("otel.endpoint: %q: want host:port", c.Endpoint))
		}
	}
	return errors.Join(errs...)
}

// Setup installs the propagators and, with an endpoint, a batching exporter.
// The returned function flushes and stops it.
func Setup(ctx context.Context, cfg Config, service, version string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
