package reviewdesk

import (
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/tracing"
)

// call sends req and reads its answer in a client span "reviewdesk <op>",
// which the request carries in its traceparent header.
func (c *Client) call(req *http.Request, op, key string) (status int, answer []byte, err error) {
	ctx, span := tracing.Start(req.Context(), "reviewdesk "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("reviewdesk.key", key), attribute.String("http.request.method", req.Method)))
	defer span.End()
	req = req.WithContext(ctx)
	tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.hc.Do(req)
	if err == nil {
		status = resp.StatusCode
		answer, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		resp.Body.Close()
	}
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
