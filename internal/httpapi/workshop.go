package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// Decorator changes an attempt before it runs, reading its HTTP request
// (package workshop's knobs): it may refuse it (answered, nothing stored)
// or change its request (its path, its TTL).
type Decorator func(r *http.Request, req *idempotency.Request) (Decoration, error)

// Decoration is what a Decorator does to one attempt.
type Decoration struct {
	// Hold, if set, runs inside the work before it decides: after the claim
	// on the two-phase path, before the one statement on the one-phase path.
	Hold func(context.Context) error
	// DropAnswer closes the connection without the answer: a lost response.
	DropAnswer bool
}

// hold is what runs inside the work before it decides: Deps.InWork, then
// the decoration's Hold; nil when there is neither.
func (s *Server) hold(r *http.Request, d Decoration) func(context.Context) error {
	if s.InWork == nil {
		return d.Hold
	}
	return func(ctx context.Context) error {
		if err := s.InWork(ctx, r); err != nil || d.Hold == nil {
			return err
		}
		return d.Hold(ctx)
	}
}

// dropConnection closes the client's connection without a response.
func dropConnection(logger *slog.Logger, w http.ResponseWriter, r *http.Request) {
	info(r).dropped = true
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		logger.ErrorContext(r.Context(), "drop response", "err", err, "request_id", requestID(r))
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
