package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// Decorator changes an attempt before it runs (package workshop's knobs): it
// may refuse it, nothing stored, or change its request (its path, its TTL).
// The knobs decorate an operation from outside: the operation and the Runner
// stay as in production, and a request without knobs is not touched.
type Decorator func(r *http.Request, req *idempotency.Request) (Decoration, error)

// Decoration is what a Decorator does to one attempt.
type Decoration struct {
	Hold       func(context.Context) error // runs inside the work before it decides
	DropAnswer bool                        // closes the connection without the answer
}

// dropConnection closes the client's connection without a response: a lost
// response after the commit, which only a retry with the same key can recover.
func dropConnection(logger *slog.Logger, w http.ResponseWriter, r *http.Request) {
	info(r).dropped = true
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		logger.ErrorContext(r.Context(), "drop response", "err", err, "req_id", reqID(r))
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
