package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/demo-api/demo-api/internal/apperr"
)

// routes is the whole API surface; ops are the operations' (demo_requests.go).
// The probes, the metrics and the problem pages need no token; every route
// of an actor's data sits behind authenticate, in one group, so a new route
// cannot be added beside it by mistake.
func (s *Server) routes(ops []Route) http.Handler {
	r := chi.NewRouter()
	// Every answer, a 404 and a panic's too, is its actor's: never sniffed, run
	// as a page, framed or cached.
	r.Use(middleware.SetHeader("X-Content-Type-Options", "nosniff"),
		middleware.SetHeader("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
		middleware.SetHeader("Referrer-Policy", "no-referrer"),
		middleware.SetHeader("Cache-Control", "no-store"),
		middleware.RequestID, traceRequests, s.logRequests, s.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, rq *http.Request) {
		WriteError(s.Logger, w, rq, apperr.Errorf(apperr.NotFound, "no such route"))
	})
	r.MethodNotAllowed(handleMethodNotAllowed(s.Logger, r))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"}) // the process serves
	})
	r.Method(http.MethodGet, "/readyz", handleReadyz(s.Logger, s.Ready, s.Replication))
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	r.Method(http.MethodGet, "/problems/{code}", handleProblemPage(s.Logger))
	r.Group(func(r chi.Router) {
		r.Use(s.refuseDeclaredOversize, s.authenticate)
		for _, op := range ops {
			r.Method(op.Method, op.Pattern, op.Handler)
		}
		r.Method(http.MethodGet, "/v1/demo-requests/{id}", handleGetDemoRequest(s.Logger, s.Demo))
		if s.Deliveries != nil {
			r.Method(http.MethodGet, "/v1/demo-requests/{id}/delivery", handleDelivery(s.Logger, s.Deliveries.Store.Delivery))
			r.Method(http.MethodPost, "/v1/demo-requests/{id}/delivery/reconcile", handleDelivery(s.Logger, s.Deliveries.Reconcile))
		}
		// The outcome route reads what the keys' statements wrote, for the
		// caller's own scope only.
		r.Method(http.MethodGet, "/v1/idempotency-keys/{key}", handleKeyOutcome(s.Logger, s.Keys, s.TTL, ops))
	})
	return r
}
