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

// handleDelivery answers a request's delivery as get finds it (reconcile never sends: no key).
// A reconcile asks the other system what it holds for the request's derived
// key and records that; it never sends again, so it needs no key of its own.
func handleDelivery(logger *slog.Logger, get func(ctx context.Context, actor, id string) (delivery.Status, error)) http.Handler {
	return handleRead(logger, func(r *http.Request) (delivery.Status, error) {
		id := chi.URLParam(r, "id")
		if !demo.IsID(id) {
			return delivery.Status{}, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
		}
		return get(r.Context(), ActorOf(r), id)
	})
}
