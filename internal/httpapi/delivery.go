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

// handleDelivery answers a request's delivery as get finds it: GET
// …/delivery reads it; POST …/delivery/reconcile asks the desk now and
// records its answer, and never sends, so it needs no key: a repeat asks
// again and records the same.
func handleDelivery(logger *slog.Logger, get func(ctx context.Context, actor, id string) (delivery.Status, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})
}
