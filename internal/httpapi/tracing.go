package httpapi

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
	"github.com/demo-api/demo-api/internal/tracing"
)

// traceRequests makes a span "<method> <route pattern>" of each request when
// tracing is on, continuing a traceparent's trace; off, it is next itself.
// The span is named by the route's pattern, not its path: a path holds ids
// and keys, which would make a span name per request.
func traceRequests(next http.Handler) http.Handler {
	if !tracing.On() {
		return next
	}
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		route := accesslog.Route(r)
		span := trace.SpanFromContext(r.Context())
		span.SetName(r.Method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	})
	return otelhttp.NewHandler(named, "request",
		otelhttp.WithTracerProvider(tracing.Provider()), otelhttp.WithPropagators(tracing.Propagator))
}

// traceKeys makes a span "idempotency" of each run of a key when tracing is
// on, with its outcome and path; a 5xx is an error. Off, it is run itself.
func traceKeys(run func(context.Context, idempotency.Request, idempotency.Work) (idempotency.Result, error)) func(context.Context, idempotency.Request, idempotency.Work) (idempotency.Result, error) {
	if !tracing.On() {
		return run
	}
	return func(ctx context.Context, req idempotency.Request, work idempotency.Work) (idempotency.Result, error) {
		ctx, span := tracing.Start(ctx, "idempotency", trace.WithAttributes(attribute.String("idempotency.operation", req.Scope.Operation)))
		defer span.End()
		res, err := run(ctx, req, work)
		span.SetAttributes(attribute.String("idempotency.outcome", string(res.Outcome)),
			attribute.String("idempotency.path", string(res.Path)), attribute.Bool("idempotency.replayed", res.Replayed))
		if err != nil {
			span.SetAttributes(attribute.String("idempotency.code", apperr.Code(err)))
			if problem.Render(err).Status >= 500 {
				span.SetStatus(codes.Error, apperr.Code(err))
			}
		}
		return res, err
	}
}
