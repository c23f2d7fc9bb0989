// Package httpapi is the HTTP transport: routes, authentication, decoding and
// the idempotency headers; a service adds its operations through Deps.Routes.
// Around it, composed here: the access log (package accesslog), errors as
// problems (package problem) and the workshop's knobs (package workshop).
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/workshop"
)

// Deps is what the server needs; NewServer names what it lacks.
type Deps struct {
	Logger *slog.Logger
	Keys   idempotency.Store
	Demo   DemoRequests
	Writes Writes // the business changes that commit with a key
	Tokens auth.Tokens
	// Authenticate names the actor of a token Tokens do not hold; its error goes in the 401.
	Authenticate func(token string) (actor string, err error)
	Deliveries   *delivery.Dispatcher             // serves the delivery routes of a demo request
	Routes       func(s *Server) ([]Route, error) // a service's own operations, behind authentication
	Ready        func(context.Context) error      // whether the database answers (/readyz)
	Replication  func() any                       // how commits replicate, as last read (/readyz); nil before the first
	TTL          time.Duration                    // replay window of a completed key
	Lease        time.Duration                    // ownership of a claim
	// NewKeysPerSecond and NewKeysBurst bound each actor's new keys (idempotency.NewKeys); 0: none.
	NewKeysPerSecond float64
	NewKeysBurst     int
	Decorate         workshop.Decorator // reads each attempt's knobs before it runs (package workshop's layer)
	Workshop         bool               // the workshop's knobs are on
	Metrics          Metrics            // records outcomes and latencies, and serves /metrics
	Path             idempotency.Path   // makes every operation take this path; tests run every branch on both
}

// DemoRequests decides the creates and cancels of demo requests, and reads
// them: a *demo.Service, or a service's own around it.
type DemoRequests interface {
	Create(actor string, in demo.CreateInput, now time.Time) (demo.Request, error)
	Cancel(ctx context.Context, actor, id string, now time.Time) (demo.Request, error)
	Get(ctx context.Context, actor, id string) (demo.Request, error)
}

// Writes makes the operations' business changes, each committed with its key.
// An Effect is a description, not an action: the store runs it inside the
// statement (or transaction) that completes the key.
type Writes interface {
	CreateDemoRequest(demo.Request) idempotency.Effect
	CancelDemoRequest(demo.Request) idempotency.Effect
}

// Metrics is what the server reports to: the access log's requests and
// attempts, the Runner's outcomes, and the page that serves them.
type Metrics interface {
	accesslog.Metrics
	Outcome(operation string, p idempotency.Path, o idempotency.Outcome)
	Handler() http.Handler
}

// Server is what the operations are made with (Idempotent, Deps.Routes):
// the logger of their errors and the Runner inside its layers. One Runner
// serves every operation: keys are scoped by operation, so they share its
// lease, TTL and waiters without meeting.
type Server struct {
	Logger *slog.Logger
	// run is the Runner's Do (the state machine of one key) inside the
	// layers NewServer puts around it: a span, the workshop's knobs, the
	// bound on new keys (idempotency.NewKeys) and Prefer: wait (idempotency.Waits).
	run  workshop.Run
	path idempotency.Path // Deps.Path
}

// api is the whole API as NewServer composes it: Deps, and the Server its
// operations are made with.
type api struct {
	Deps
	ops *Server
}

// NewServer returns the HTTP handler of the whole API, or what d lacks. An
// incomplete Deps is refused here, at start-up, by name.
func NewServer(d Deps) (http.Handler, error) {
	switch {
	case d.Logger == nil || d.Demo == nil || d.Writes == nil || d.Ready == nil:
		return nil, errors.New("httpapi: Deps needs a Logger, Demo, Writes and Ready")
	case len(d.Tokens) == 0 && d.Authenticate == nil:
		return nil, errors.New("httpapi: Deps needs at least one token (or an Authenticate of its own)")
	}
	s := &Server{Logger: d.Logger, path: d.Path}
	cfg := idempotency.Config{Store: d.Keys, TTL: d.TTL, Lease: d.Lease}
	if d.Metrics != nil {
		cfg.Observe = d.Metrics.Outcome
	}
	runner, err := idempotency.NewRunner(cfg)
	if err != nil {
		return nil, err
	}
	var newKeys *idempotency.NewKeys // nil: no bound
	if d.NewKeysPerSecond != 0 {
		if newKeys, err = idempotency.BoundNewKeys(d.NewKeysPerSecond, d.NewKeysBurst, d.Keys, cfg.Observe); err != nil {
			return nil, err
		}
	}
	// The layers, outermost first: the span; the workshop's knobs, which
	// change the request and hold the work; the admission, which decides
	// before the key is touched whether this request may store a new key;
	// the wait for another attempt's answer, which asks the Runner again.
	waits := idempotency.NewWaits(nil)
	s.run = traceKeys(workshop.Around(func(ctx context.Context, req idempotency.Request, work idempotency.Work) (idempotency.Result, error) {
		return newKeys.Admit(ctx, req, func(ctx context.Context) (idempotency.Result, error) {
			return waits.Do(ctx, req, func(ctx context.Context, req idempotency.Request) (idempotency.Result, error) {
				return runner.Do(ctx, req, work)
			})
		})
	}))
	a := &api{Deps: d, ops: s}
	ops, err := a.operations()
	if err != nil {
		return nil, err
	}
	return a.routes(ops), nil
}
