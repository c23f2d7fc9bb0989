package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

// handleHealthz answers while the process serves.
func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// handleReadyz answers 200 while the database answers, 503 otherwise.
func handleReadyz(logger *slog.Logger, ready func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			writeError(logger, w, r, &apperr.Error{Code: apperr.Unavailable, Message: "the database does not answer", RetryAfter: time.Second, Err: err})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}
