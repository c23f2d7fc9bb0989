package httpapi

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/problem"
	"github.com/demo-api/demo-api/internal/workshop"
)

// routes is the whole API surface; ops are the operations' (demo_requests.go).
// The probes, the metrics and the problem pages need no token; every route
// of an actor's data sits behind authenticate, in one group, so a new route
// cannot be added beside it by mistake.
func (s *api) routes(ops []Route) http.Handler {
	r := chi.NewRouter()
	// Every answer, a 404 and a panic's too, is its actor's: never sniffed, run
	// as a page, framed or cached.
	r.Use(middleware.SetHeader("X-Content-Type-Options", "nosniff"),
		middleware.SetHeader("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
		middleware.SetHeader("Referrer-Policy", "no-referrer"),
		middleware.SetHeader("Cache-Control", "no-store"),
		middleware.RequestID, traceRequests, accesslog.Requests(s.Logger, s.Metrics), s.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, rq *http.Request) {
		problem.Write(s.Logger, w, rq, apperr.Errorf(apperr.NotFound, "no such route"))
	})
	r.MethodNotAllowed(handleMethodNotAllowed(s.Logger, r))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"}) // the process serves
	})
	r.Method(http.MethodGet, "/readyz", handleReadyz(s.Logger, s.Ready, s.Replication))
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	r.Method(http.MethodGet, "/problems/{code}", problem.Page(s.Logger))
	r.Group(func(r chi.Router) {
		r.Use(s.refuseDeclaredOversize, s.authenticate)
		for _, op := range ops {
			if op.Operation != "" { // the layers of an idempotent route: the client's hints, the workshop's knobs
				op.Handler = s.readHints(workshop.Layer(s.Logger, s.Decorate)(op.Handler))
			}
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

// handleMethodNotAllowed answers 405 with the Allow header chi would send.
func handleMethodNotAllowed(logger *slog.Logger, routes chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		problem.Write(logger, w, r, apperr.Errorf(apperr.MethodNotAllowed, "method not allowed on this route"))
	}
}
