package postgres

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/tracing"
)

// traceStatement starts the span of a run of query, named after its file,
// inside ctx's recording span only; done ends it with the statement's error.
// A statement outside a traced request (the sweeper's, say) makes no span: a
// trace shows a request's statements, not a stream of orphans.
func traceStatement(ctx context.Context, query string) (context.Context, func(error)) {
	if !tracing.On() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func(error) {}
	}
	ctx, span := tracing.Start(ctx, statementName(query), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "statement failed")
		}
		span.End()
	}
}

// statementName is the file its first line names ("-- claim.sql: …"), or "sql".
func statementName(query string) string {
	line, _, _ := strings.Cut(query, "\n")
	rest, ok := strings.CutPrefix(line, "-- ")
	name, _, found := strings.Cut(rest, ":")
	if !ok || !found || !strings.HasSuffix(name, ".sql") || strings.ContainsAny(name, " /") {
		return "sql"
	}
	return name
}
