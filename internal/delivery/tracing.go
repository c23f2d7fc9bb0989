package delivery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/tracing"
)

// tracedAttempt is attempt in a span "delivery <kind>" (package tracing),
// the parent of the desk's calls; a delivery that gave up is an error.
func (d *Dispatcher) tracedAttempt(ctx context.Context, row Due) Mark {
	ctx, span := tracing.Start(ctx, "delivery "+row.Kind, trace.WithAttributes(
		attribute.String("delivery.request_id", row.RequestID),
		attribute.String("delivery.kind", row.Kind),
		attribute.String("delivery.key", EventKey(row.RequestID, row.Kind, row.Seq)),
		attribute.Int("delivery.attempt", row.Attempt)))
	defer span.End()
	m := d.attempt(ctx, row)
	span.SetAttributes(attribute.String("delivery.state", m.State))
	if m.State == Unknown || m.State == Failed {
		span.SetStatus(codes.Error, m.State)
	}
	return m
}
