package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/demo-api/demo-api/internal/web"
)

// routes is the whole API surface; ops are the idempotent operations
// (demo_requests.go lists them, each with its method and pattern).
func (s *server) routes(ops []route) http.Handler {
	r := s.base()
	r.Method(http.MethodGet, "/problems/{code}", handleProblemPage(s.Logger))

	// The pages (package web): the create page and the workshop page.
	deskFaults := s.Workshop && s.DeskFaults != nil
	pageCfg := web.Config{Workshop: s.Workshop, Room: s.Room, TTL: s.TTL, Lease: s.Lease, DeskFaults: deskFaults}
	pageCfg.Expedite = s.Desk != nil // demo-only
	pages := web.Handler(pageCfg)
	r.Method(http.MethodGet, "/", pages)
	r.Method(http.MethodGet, "/workshop", pages)
	r.Method(http.MethodGet, "/ui/*", pages)

	r.Group(func(r chi.Router) {
		r.Use(authenticate(s.Logger, s.Tokens, s.Room))
		for _, op := range ops {
			r.Method(op.method, op.pattern, op.handler)
		}
		r.Method(http.MethodGet, "/v1/demo-requests/{id}", handleGetDemoRequest(s.Logger, s.Demo))
		if s.Desk != nil { // demo-only
			r.Method(http.MethodGet, "/v1/demo-requests/{id}/expedite", handleGetExpedite(s.Logger, s.Demo, s.Expedites)) // demo-only
		} // demo-only
		if s.Deliveries != nil {
			r.Method(http.MethodGet, "/v1/demo-requests/{id}/delivery", handleGetDelivery(s.Logger, s.Deliveries))
			r.Method(http.MethodPost, "/v1/demo-requests/{id}/delivery/reconcile", handleReconcile(s.Logger, s.Deliveries))
		}
		r.Method(http.MethodGet, "/v1/idempotency-keys/{key}", handleKeyOutcome(s.Logger, s.Keys, ops))
		if deskFaults {
			r.Method(http.MethodPut, "/workshop/desk-faults", handleDeskFaults(s.Logger, s.DeskFaults))
		}
	})
	return r
}

// base is what every server of the API has, the plain one too
// (NewPlainServer): the middleware (security headers, request id, the
// request's log line and metrics, panic recovery), problem answers for
// unknown routes and methods,
// /healthz, /readyz and /metrics.
func (s *server) base() chi.Router {
	r := chi.NewRouter()
	r.Use(securityHeaders, middleware.RequestID, s.logRequests, recoverPanics(s.Logger))
	r.NotFound(handleProblem(s.Logger, errNoRoute))
	r.MethodNotAllowed(handleMethodNotAllowed(s.Logger, r))
	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(s.Logger, s.Ready, s.Replication))
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	return r
}
