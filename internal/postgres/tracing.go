package postgres

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/tracing"
)

// traceStatement starts the span of one run of query, named after its file,
// inside ctx's span when tracing is on and that span is recording (a
// request's, a delivery's): the background loops' batches make no traces
// of their own. done ends the span with the statement's error.
func traceStatement(ctx context.Context, query string) (context.Context, func(error)) {
	if !tracing.On() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, untraced
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

func untraced(error) {}

// statementName is the name of the file a statement comes from, which its
// first line gives ("-- claim.sql: …"), or "sql" for other text.
func statementName(query string) string {
	line, _, _ := strings.Cut(query, "\n")
	rest, ok := strings.CutPrefix(line, "-- ")
	name, _, found := strings.Cut(rest, ":")
	if !ok || !found || !strings.HasSuffix(name, ".sql") || strings.ContainsAny(name, " /") {
		return "sql"
	}
	return name
}
