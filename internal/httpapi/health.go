package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

// readyTimeout is how long /readyz waits for the database.
const readyTimeout = 2 * time.Second

// handleHealthz answers while the process serves.
func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// writesHeld is what a replication reading (postgres.Replication) may say
// of writes: why every one is answered 503 now, "" when they go through.
type writesHeld interface{ WritesHeld() string }

// handleReadyz answers 200 while the database answers, 503 otherwise, and
// within readyTimeout either way. Its detail says how commits replicate,
// when replication is set, and when writes cannot be acknowledged
// (writes: unavailable): ready still, for reads, replays and the outcome
// route, which every replica could answer no better.
func handleReadyz(logger *slog.Logger, ready func(context.Context) error, replication func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := untilDone(ctx, ready); err != nil {
			WriteError(logger, w, r, &apperr.Error{Code: apperr.Unavailable, Message: "the database does not answer", RetryAfter: time.Second, Err: err})
			return
		}
		body := map[string]any{"status": "ready"}
		if replication != nil {
			if r := replication(); r != nil {
				body["replication"] = r
				if w, ok := r.(writesHeld); ok && w.WritesHeld() != "" {
					body["writes"], body["detail"] = "unavailable", w.WritesHeld()
				}
			}
		}
		WriteJSON(w, http.StatusOK, body)
	})
}

// untilDone returns f's error, or ctx's if ctx ends first. A driver may not
// return at its context's deadline: in a partition lib/pq waits for a reply
// (and dials its cancel request) until TCP gives up, so f is left to return
// on its own, in the background, and its answer is dropped.
func untilDone(ctx context.Context, f func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
