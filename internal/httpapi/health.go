package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

// handleReadyz answers 200 while the database answers within 2 s, with how commits
// replicate (writes: unavailable while a reading holds them, ready for reads), else 503.
// Readiness is about the database, liveness (/healthz) about the process: a
// replica that cannot reach its database is taken out of the balancer, not
// restarted, since a restart would not bring the database back. How commits
// replicate is shown because, with asynchronous replication, a failover may
// lose an acknowledged key, and an operator must know which one runs.
func handleReadyz(logger *slog.Logger, ready func(context.Context) error, replication func() any) http.Handler {
	return handleRead(logger, func(r *http.Request) (map[string]any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := untilDone(ctx, ready); err != nil {
			return nil, &apperr.Error{Code: apperr.Unavailable, Message: "the database does not answer", RetryAfter: time.Second, Err: err}
		}
		body := map[string]any{"status": "ready"}
		if replication != nil {
			if r := replication(); r != nil {
				body["replication"] = r
				if w, ok := r.(interface{ WritesHeld() string }); ok && w.WritesHeld() != "" {
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
