package reviewdesk

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/tracing"
)

// call is do in a client span "reviewdesk <op>", which the request carries
// in its traceparent header.
func (c *Client) call(req *http.Request, op, key string) (int, []byte, error) {
	ctx, span := tracing.Start(req.Context(), "reviewdesk "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("reviewdesk.key", key), attribute.String("http.request.method", req.Method)))
	defer span.End()
	req = req.WithContext(ctx)
	tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	status, answer, err := c.do(req)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "no answer")
	case status >= 500:
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	if status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	return status, answer, err
}
