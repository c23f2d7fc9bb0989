package delivery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/tracing"
)

// tracedAttempt is attempt in a span of its own, "delivery <kind>", when
// tracing is on (package tracing): its attributes are the request, the
// event's key at the desk (EventKey), the attempt's number and the state it
// decided. The desk's calls are its
// children. A delivery that gave up (unknown, failed) sets the span's
// status to error.
func (d *Dispatcher) tracedAttempt(ctx context.Context, row Due) Mark {
	if !tracing.On() {
		return d.attempt(ctx, row)
	}
	key := EventKey(row.RequestID, row.Kind, row.Seq)
	ctx, span := tracing.Start(ctx, "delivery "+row.Kind, trace.WithAttributes(
		attribute.String("delivery.request_id", row.RequestID),
		attribute.String("delivery.kind", row.Kind),
		attribute.String("delivery.key", key),
		attribute.Int("delivery.attempt", row.Attempt)))
	defer span.End()
	m := d.attempt(ctx, row)
	span.SetAttributes(attribute.String("delivery.state", m.State))
	if m.State == Unknown || m.State == Failed {
		span.SetStatus(codes.Error, m.State)
	}
	return m
}
