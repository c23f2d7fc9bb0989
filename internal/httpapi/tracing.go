package httpapi

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tracing"
)

// traceRequests makes a span "<method> <route pattern>" of each request when
// tracing is on, continuing a traceparent's trace; off, it is next itself.
func traceRequests(next http.Handler) http.Handler {
	if !tracing.On() {
		return next
	}
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		route := routeOf(r)
		span := trace.SpanFromContext(r.Context())
		span.SetName(r.Method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	})
	return otelhttp.NewHandler(named, "request",
		otelhttp.WithTracerProvider(tracing.Provider()), otelhttp.WithPropagators(tracing.Propagator))
}

// do is the Runner's Do, in a span "idempotency" when tracing is on; a 5xx is an error.
func (s *Server) do(ctx context.Context, req idempotency.Request, work idempotency.Work) (idempotency.Result, error) {
	ctx, span := tracing.Start(ctx, "idempotency", trace.WithAttributes(attribute.String("idempotency.operation", req.Scope.Operation)))
	defer span.End()
	res, err := s.idem.Do(ctx, req, work)
	span.SetAttributes(attribute.String("idempotency.outcome", string(res.Outcome)),
		attribute.String("idempotency.path", string(res.Path)), attribute.Bool("idempotency.replayed", res.Replayed))
	if err != nil {
		span.SetAttributes(attribute.String("idempotency.code", apperr.Code(err)))
		if Render(err).Status >= 500 {
			span.SetStatus(codes.Error, apperr.Code(err))
		}
	}
	return res, err
}
