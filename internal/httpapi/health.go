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

// writesHeld is a replication reading (postgres.Replication) that says why
// writes are answered 503 now, or "".
type writesHeld interface{ WritesHeld() string }

// handleReadyz answers 200 while the database answers within readyTimeout,
// with how commits replicate (writes: unavailable, ready for reads), else 503.
func handleReadyz(logger *slog.Logger, ready func(context.Context) error, replication func() any) http.Handler {
	return handleRead(logger, func(r *http.Request) (map[string]any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := untilDone(ctx, ready); err != nil {
			return nil, &apperr.Error{Code: apperr.Unavailable, Message: "the database does not answer", RetryAfter: time.Second, Err: err}
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
		return body, nil
	})
}

// untilDone returns f's error, or ctx's if ctx ends first: in a partition
// lib/pq may outwait its deadline, so f is left to return in the background.
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
