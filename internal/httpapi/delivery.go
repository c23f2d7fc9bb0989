package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
)

// Deliveries reads a request's hand-over to the review desk and reconciles
// a stuck one (package delivery).
type Deliveries interface {
	Delivery(ctx context.Context, actor, id string) (delivery.Status, error)
	Reconcile(ctx context.Context, actor, id string) (delivery.Status, error)
}

// handleGetDelivery is GET /v1/demo-requests/{id}/delivery: the state,
// attempts, last error, next try and the desk's reference.
func handleGetDelivery(logger *slog.Logger, d Deliveries) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answerDelivery(logger, w, r, d.Delivery)
	})
}

// handleReconcile is POST /v1/demo-requests/{id}/delivery/reconcile: it asks
// the desk now and records its answer. It never sends, so it needs no key: a
// repeat asks again and records the same.
func handleReconcile(logger *slog.Logger, d Deliveries) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answerDelivery(logger, w, r, d.Reconcile)
	})
}

func answerDelivery(logger *slog.Logger, w http.ResponseWriter, r *http.Request,
	get func(ctx context.Context, actor, id string) (delivery.Status, error)) {
	id := chi.URLParam(r, "id")
	if !demo.IsID(id) {
		WriteError(logger, w, r, apperr.Errorf(apperr.NotFound, "no demo request %q", id))
		return
	}
	st, err := get(r.Context(), ActorOf(r), id)
	if err != nil {
		WriteError(logger, w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, st)
}
