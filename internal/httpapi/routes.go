package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// routes is the whole API surface.
func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.logRequests, recoverPanics(s.Logger))
	r.NotFound(handleProblem(s.Logger, errNoRoute))
	r.MethodNotAllowed(handleMethodNotAllowed(s.Logger, r))

	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(s.Logger, s.Ready))
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	r.Group(func(r chi.Router) {
		r.Use(authenticate(s.Logger, s.Tokens))
		r.Method(http.MethodPost, "/v1/demo-requests", handleCreateDemoRequest(s.Logger, s.idem, s.Demo, s.workshop()))
		r.Method(http.MethodGet, "/v1/demo-requests/{id}", handleGetDemoRequest(s.Logger, s.Demo))
		r.Method(http.MethodGet, "/v1/idempotency-keys/{key}", handleKeyOutcome(s.Logger, s.Keys))
	})
	return r
}
