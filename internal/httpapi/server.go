// Package httpapi is the HTTP transport: routes, authentication, request
// decoding, problem responses and the idempotency headers. The decisions it
// applies live in the idempotency and demo packages.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// Deps is what the server needs.
type Deps struct {
	Logger *slog.Logger
	Keys   idempotency.Store
	Demo   *demo.Service
	Tokens auth.Tokens
	// Ready reports whether the database answers (/readyz).
	Ready func(context.Context) error
	TTL   time.Duration // replay window of a completed key
	Lease time.Duration // ownership of a claim
	// Workshop enables the Workshop-* request headers; without it they are
	// refused with 400 workshop_disabled.
	Workshop bool
	// Metrics, if set, records outcomes and latencies; it also serves /metrics.
	Metrics Metrics
	// AfterClaim, if set, runs inside the work after the claim, before the
	// business effect, with the work's context and the client's request:
	// tests hold or fail a request there.
	AfterClaim func(ctx context.Context, r *http.Request) error
}

// Metrics is what the server reports to.
type Metrics interface {
	Outcome(operation string, o idempotency.Outcome)
	Request(route string, status int, d time.Duration)
	Handler() http.Handler
}

type server struct {
	Deps
	idem *idempotency.Runner
}

// NewServer returns the HTTP handler of the whole API.
func NewServer(d Deps) http.Handler {
	s := &server{Deps: d}
	s.idem = &idempotency.Runner{Store: d.Keys, TTL: d.TTL, Lease: d.Lease, Refusal: refusal}
	if d.Metrics != nil {
		s.idem.Observe = d.Metrics.Outcome
	}
	return s.routes()
}
