package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// routes is the whole API surface; ops are the routes of the operations
// (demo_requests.go lists them).
func (s *Server) routes(ops []Route) http.Handler {
	r := s.base()
	r.Method(http.MethodGet, "/problems/{code}", handleProblemPage(s.Logger))
	for _, p := range s.Public {
		r.Method(p.Method, p.Pattern, p.Handler)
	}
	r.Group(func(r chi.Router) {
		r.Use(authenticate(s.Logger, s.Tokens, s.Authenticate))
		for _, op := range ops {
			r.Method(op.Method, op.Pattern, op.Handler)
		}
		r.Method(http.MethodGet, "/v1/demo-requests/{id}", handleGetDemoRequest(s.Logger, s.Demo))
		if s.Deliveries != nil {
			r.Method(http.MethodGet, "/v1/demo-requests/{id}/delivery", handleDelivery(s.Logger, s.Deliveries.Delivery))
			r.Method(http.MethodPost, "/v1/demo-requests/{id}/delivery/reconcile", handleDelivery(s.Logger, s.Deliveries.Reconcile))
		}
		r.Method(http.MethodGet, "/v1/idempotency-keys/{key}", handleKeyOutcome(s.Logger, s.Keys, s.TTL, ops))
	})
	return r
}

// base is what every server of the API has: the middleware (security
// headers, request id, the request's span when tracing is on, its log line
// and metrics, panic recovery), problem answers for unknown routes and
// methods, /healthz, /readyz and /metrics.
func (s *Server) base() chi.Router {
	r := chi.NewRouter()
	r.Use(securityHeaders, middleware.RequestID, traceRequests, s.logRequests, recoverPanics(s.Logger))
	r.NotFound(handleProblem(s.Logger, errNoRoute))
	r.MethodNotAllowed(handleMethodNotAllowed(s.Logger, r))
	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(s.Logger, s.Ready, s.Replication))
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	return r
}
