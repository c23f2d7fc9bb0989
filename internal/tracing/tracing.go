// Package tracing makes spans, exported over OTLP/HTTP with protobuf, when
// the standard OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ variant) is set.
package tracing

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scope is the instrumentation scope of the service's spans.
const scope = "github.com/demo-api/demo-api"

// Propagator carries a trace across HTTP calls: W3C traceparent and baggage.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// on is the provider Use installed and its tracer, asked for once; nil is off.
type on struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

var current atomic.Pointer[on]

// On reports whether spans are made.
func On() bool { return current.Load() != nil }

// Use makes spans with tp from now on (nil: none).
func Use(tp trace.TracerProvider) {
	if tp == nil {
		current.Store(nil)
		return
	}
	current.Store(&on{provider: tp, tracer: tp.Tracer(scope)})
}

// Provider is the provider spans are made with: a no-op one when off.
func Provider() trace.TracerProvider {
	if c := current.Load(); c != nil {
		return c.provider
	}
	return noop.TracerProvider{}
}

// Start starts a span named name, a child of ctx's span if it has one. Off,
// it returns ctx and a span that records nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	c := current.Load()
	if c == nil {
		return ctx, noop.Span{}
	}
	return c.tracer.Start(ctx, name, opts...)
}

// TraceID is the trace id of ctx's span when it is recording, else "".
func TraceID(ctx context.Context) string {
	if span := trace.SpanFromContext(ctx); On() && span.IsRecording() {
		return span.SpanContext().TraceID().String()
	}
	return ""
}

// Config is what Setup reads of the environment (FromEnv).
type Config struct {
	Endpoint    string // the URL spans are posted to; empty: tracing is off
	Protocol    string // only http/protobuf is supported
	ServiceName string
}

// FromEnv reads the standard OpenTelemetry variables: the traces' endpoint,
// else the base one with /v1/traces; none when OTEL_SDK_DISABLED=true.
func FromEnv(getenv func(string) string) Config {
	c := Config{
		Endpoint:    getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
		Protocol:    cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf"),
		ServiceName: cmp.Or(getenv("OTEL_SERVICE_NAME"), "demo-api"),
	}
	if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); c.Endpoint == "" && base != "" {
		c.Endpoint = strings.TrimRight(base, "/") + "/v1/traces"
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		c.Endpoint = ""
	}
	return c
}

// FlushTimeout bounds the export of the spans still buffered at the shutdown.
const FlushTimeout = 5 * time.Second

// Setup turns tracing on as c says (off without an endpoint); shutdown
// exports the spans still buffered, and logs a failure. The exporter reads
// the other variables.
func Setup(ctx context.Context, c Config, logger *slog.Logger) (shutdown func(context.Context) error, err error) {
	if c.Endpoint == "" {
		Use(nil)
		return func(context.Context) error { return nil }, nil
	}
	if c.Protocol != "http/protobuf" {
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: only http/protobuf is supported", c.Protocol)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing: the OTLP endpoint %q is not an http:// or https:// URL", c.Endpoint)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", c.ServiceName)))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	// OpenTelemetry's own default prints plain text inside the JSON log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("tracing: export", "err", err) }))
	otel.SetLogger(logr.FromSlogHandler(logger.Handler()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// Libraries that trace through the global provider join the same traces.
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	Use(tp)
	logger.Info("tracing", "endpoint", u.Redacted(), "protocol", c.Protocol, "service_name", c.ServiceName)
	return func(ctx context.Context) error {
		Use(nil)
		ctx, cancel := context.WithTimeout(ctx, FlushTimeout)
		defer cancel()
		err := tp.Shutdown(ctx)
		if err != nil {
			logger.Warn("tracing: spans not exported at the stop", "err", err)
		}
		return err
	}, nil
}
