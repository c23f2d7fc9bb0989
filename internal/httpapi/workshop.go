package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// Decorator changes an attempt at an idempotent operation before it runs,
// reading its HTTP request: the workshop's knobs are one (package
// workshop). It may refuse the attempt (its error is answered, and nothing
// is stored) or change its request (its path, its TTL).
type Decorator func(r *http.Request, req *idempotency.Request) (Decoration, error)

// Decoration is what a Decorator does to one attempt.
type Decoration struct {
	// Hold, if set, runs inside the work before it decides: after the claim
	// on the two-phase path, before the one statement on the one-phase path.
	Hold func(context.Context) error
	// DropAnswer closes the connection once the work is done, without the
	// answer: the lost response a retry recovers.
	DropAnswer bool
}

// hold is what runs inside the work before it decides: the tests' seam
// (Deps.InWork), then the decoration's Hold; nil when there is none.
func (s *Server) hold(r *http.Request, d Decoration) func(context.Context) error {
	switch {
	case s.InWork == nil:
		return d.Hold
	case d.Hold == nil:
		return func(ctx context.Context) error { return s.InWork(ctx, r) }
	}
	return func(ctx context.Context) error {
		if err := s.InWork(ctx, r); err != nil {
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
