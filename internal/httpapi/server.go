// Package httpapi is the HTTP transport: routes, authentication, request
// decoding, problem responses and the idempotency headers. The decisions it
// applies live in the idempotency and demo packages; one generic piece
// (operation.go) makes any operation safe to retry, and a service adds its
// own operations and routes through Deps.Routes.
package httpapi

import (
	"context"
	"errors"
	"fmt"
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
	// Writes makes the business changes that commit with a key.
	Writes Writes
	Tokens auth.Tokens
	// Deliveries, if set, serves the delivery routes of a demo request.
	Deliveries Deliveries
	// Routes, if set, returns more routes behind authentication, made with
	// the server (Idempotent): a service's own operations.
	Routes func(s *Server) ([]Route, error)
	// Public are more routes that need no token (pages).
	Public []Route
	// Ready reports whether the database answers (/readyz).
	Ready func(context.Context) error
	// Replication, if set, is shown on /readyz: how the database
	// replicates commits, as last read (nil before the first reading).
	// It is read in the background, so /readyz costs no more than Ready.
	Replication func() any
	TTL         time.Duration // replay window of a completed key
	Lease       time.Duration // ownership of a claim
	// MaxWait caps Prefer: wait (default 10 s).
	MaxWait time.Duration
	// NewKeysPerSecond and NewKeysBurst bound the new keys of each actor,
	// in this process (idempotency.Config); zero: no bound. Over the bound
	// a request is answered 429 rate_limited and nothing is stored.
	NewKeysPerSecond float64
	NewKeysBurst     int
	// Decorate, if set, changes each attempt at an idempotent operation
	// before it runs (package workshop's knobs).
	Decorate Decorator
	// Workshop says the workshop's knobs are on (Decorate); a room needs them.
	Workshop bool
	// Room, with Workshop, makes a workshop room: any bearer token dev-<name>
	// is the participant dev-<name> (auth.RoomActor), and Tokens may be empty
	// (auth.CheckRoom). Anyone who reaches the server may act as any
	// participant: for a workshop only.
	Room bool
	// Metrics, if set, records outcomes and latencies; it also serves /metrics.
	Metrics Metrics
	// Path, if set, makes every operation take this path; tests run every
	// branch on both.
	Path idempotency.Path
	// Clock is the clock works decide with and waits are measured by
	// (default time.Now); leases and expiry use the store's.
	Clock func() time.Time
	// InWork, if set, runs inside every work before it decides (before
	// Decorate's Hold), with the work's context and the client's request:
	// tests hold or fail a request there.
	InWork func(ctx context.Context, r *http.Request) error
}

// Writes makes the business changes of the operations; the store commits
// each with the completion of its key.
type Writes interface {
	CreateDemoRequest(demo.Request) idempotency.Effect
	CancelDemoRequest(demo.Request) idempotency.Effect
}

// Metrics is what the server reports to.
type Metrics interface {
	Outcome(operation string, p idempotency.Path, o idempotency.Outcome)
	Request(route, status string, d time.Duration)
	// Answered counts an intent that got its definite answer at the
	// client's attempt n (X-Client-Attempt).
	Answered(operation string, n int)
	Handler() http.Handler
}

// Server is the API's handler as it is being made: Deps.Routes makes a
// service's routes with it.
type Server struct {
	Deps
	idem *idempotency.Runner
}

// NewServer returns the HTTP handler of the whole API, or an error naming
// what d lacks.
func NewServer(d Deps) (http.Handler, error) {
	switch {
	case d.Logger == nil || d.Demo == nil || d.Writes == nil || d.Ready == nil:
		return nil, errors.New("httpapi: Deps needs a Logger, Demo, Writes and Ready")
	case len(d.Tokens) == 0 && !d.Room:
		return nil, errors.New("httpapi: Deps needs at least one token (or a workshop room, whose participants need none)")
	case d.Room && !d.Workshop:
		return nil, errors.New("httpapi: a workshop room (Room) needs the workshop knobs (Workshop)")
	case d.Room && auth.CheckRoom(d.Tokens) != nil:
		return nil, fmt.Errorf("httpapi: a workshop room: %w", auth.CheckRoom(d.Tokens))
	}
	s := &Server{Deps: d}
	cfg := idempotency.Config{Store: d.Keys, TTL: d.TTL, Lease: d.Lease, MaxWait: d.MaxWait, Clock: d.Clock,
		NewKeysPerSecond: d.NewKeysPerSecond, NewKeysBurst: d.NewKeysBurst}
	if d.Metrics != nil {
		cfg.Observe = d.Metrics.Outcome
	}
	var err error
	if s.idem, err = idempotency.NewRunner(cfg); err != nil {
		return nil, err
	}
	ops, err := s.operations()
	if err != nil {
		return nil, err
	}
	return s.routes(ops), nil
}
