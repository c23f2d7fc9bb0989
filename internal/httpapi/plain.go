package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// NewPlainServer returns POST /v1/demo-requests without the idempotency
// layer: no key, fingerprint, claim, stored answer or finish. The rest is
// the API's own: its middleware, authentication, decoding, decision
// (d.Demo), answer, problems, /healthz, /readyz and /metrics. insert writes
// the decided request. The bench measures the API against it, so that the
// difference is what the layer costs.
//
// It needs d.Logger, d.Demo, d.Ready and at least one token; d.Now is its
// clock (default time.Now), and d.Metrics is used if set.
func NewPlainServer(d Deps, insert func(context.Context, demo.Request) error) (http.Handler, error) {
	switch {
	case d.Logger == nil || d.Demo == nil || d.Ready == nil || insert == nil:
		return nil, errors.New("httpapi: NewPlainServer needs a Logger, Demo, Ready and insert")
	case len(d.Tokens) == 0:
		return nil, errors.New("httpapi: Deps needs at least one token")
	}
	s := &Server{Deps: d}
	op := createDemoRequest(d.Demo, noWrites{})
	r := s.base()
	r.With(authenticate(s.Logger, s.Tokens, false)).Method(http.MethodPost, "/v1/demo-requests", plain(s, op, insert))
	return r, nil
}

// plain is the handler of op without the idempotency layer: decode, decide
// now, write, answer.
func plain[In, Out any](s *Server, op Operation[In, Out], write func(context.Context, Out) error) http.Handler {
	now := s.Clock
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := op.Decode(w, r)
		if err != nil {
			WriteError(s.Logger, w, r, err)
			return
		}
		out, err := op.Decide(r.Context(), ActorOf(r), in, now())
		if err == nil {
			err = write(r.Context(), out)
		}
		var resp idempotency.Response
		if err == nil {
			resp, err = op.Render(out)
		}
		if err != nil {
			WriteError(s.Logger, w, r, err)
			return
		}
		writeResponse(w, resp, false)
	})
}

// noWrites are the writes of the plain server: none, since it writes with
// insert.
type noWrites struct{}

func (noWrites) CreateDemoRequest(demo.Request) idempotency.Effect { return nil }
func (noWrites) CancelDemoRequest(demo.Request) idempotency.Effect { return nil }
