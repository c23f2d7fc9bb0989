// Package workshop is the knobs: request headers that reproduce each branch
// of the contract on any idempotent operation (a Decorator), and what they do
// to an attempt (a Decoration).
package workshop

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
)

// Decorator reads an attempt's knobs before it runs: it may refuse them,
// nothing stored, or say what they do to the attempt. The knobs decorate an
// operation from outside, as a layer (Layer, Around): the operation and the
// Runner stay as in production, and a request without knobs is not touched.
type Decorator func(r *http.Request) (Decoration, error)

// Decoration is what a Decorator does to one attempt.
type Decoration struct {
	TwoPhase   bool                        // takes the two-phase path, so that it has a claim to hold, fail or answer late
	TTL        time.Duration               // how long its answer is replayed (0: the server's)
	Hold       func(context.Context) error // runs inside the work before it decides
	DropAnswer bool                        // closes the connection without the answer
	answered   bool                        // the run gave an answer (not an error): Layer drops it
}

// Apply is req as d changes it: its path and its TTL.
func (d Decoration) Apply(req idempotency.Request) idempotency.Request {
	if d.TwoPhase {
		req.Path = idempotency.TwoPhase
	}
	if d.TTL > 0 {
		req.TTL = d.TTL
	}
	return req
}

// decorationKey is the context key of an attempt's decoration (Layer's).
type decorationKey struct{}

// Of is the decoration of the attempt ctx belongs to, the zero one for none.
func Of(ctx context.Context) Decoration {
	if d, ok := ctx.Value(decorationKey{}).(*Decoration); ok {
		return *d
	}
	return Decoration{}
}

// Layer is the knobs' layer around an idempotent route: decorate reads them
// (its errors are answered, nothing stored) and hands them to the run
// (Around, or a route's own through Of). An answer they drop is not
// written: the connection closes instead. A nil decorate is no layer.
func Layer(logger *slog.Logger, decorate Decorator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if decorate == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, err := decorate(r)
			if err != nil {
				problem.Write(logger, w, r, err)
				return
			}
			if !d.TwoPhase && d.TTL == 0 && d.Hold == nil && !d.DropAnswer {
				next.ServeHTTP(w, r)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), decorationKey{}, &d))
			if d.DropAnswer {
				w = &dropper{ResponseWriter: w, logger: logger, r: r, d: &d}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Run is how a server runs an attempt: the Runner, inside its layers.
type Run = func(ctx context.Context, req idempotency.Request, work idempotency.Work) (idempotency.Result, error)

// Around is run with the knobs of each attempt applied (Layer's; none: run
// as it is): the request changed (Apply), and the work held first.
func Around(run Run) Run {
	return func(ctx context.Context, req idempotency.Request, work idempotency.Work) (idempotency.Result, error) {
		d, ok := ctx.Value(decorationKey{}).(*Decoration)
		if !ok {
			return run(ctx, req, work)
		}
		decide := work
		if d.Hold != nil {
			work = func(ctx context.Context, now time.Time) (idempotency.Answer, error) {
				if err := d.Hold(ctx); err != nil {
					return idempotency.Answer{}, err
				}
				return decide(ctx, now)
			}
		}
		res, err := run(ctx, d.Apply(req), work)
		d.answered = err == nil
		return res, err
	}
}

// dropper writes what a request answers, except an answer the run gave
// (not an error) where the knobs drop it: that closes the connection (Drop).
type dropper struct {
	http.ResponseWriter
	logger  *slog.Logger
	r       *http.Request
	d       *Decoration
	dropped bool
}

func (w *dropper) WriteHeader(code int) {
	if w.d.answered {
		w.dropped = true
		Drop(w.logger, w.ResponseWriter, w.r)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *dropper) Write(b []byte) (int, error) {
	if w.dropped {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *dropper) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Drop closes the client's connection without a response: a lost response
// after the commit, which only a retry with the same key can recover.
func Drop(logger *slog.Logger, w http.ResponseWriter, r *http.Request) {
	accesslog.Of(r).Dropped = true
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		logger.ErrorContext(r.Context(), "drop response", "err", err, "req_id", accesslog.ReqID(r))
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// The knobs. A request that carries one takes the two-phase path, so that
// it has a claim to hold, fail or answer late.
const (
	HeaderDelay        = "Workshop-Delay"         // e.g. 10s: holds the work after the claim; a retry meanwhile gets 409
	HeaderFail         = "Workshop-Fail"          // after-claim: the work fails, the claim is released, the answer is 503
	HeaderDropResponse = "Workshop-Drop-Response" // true: the connection closes after the commit, with no response
	HeaderTTL          = "Workshop-TTL"           // e.g. 5s, from minTTL to maxTTL: how long this request's key is replayed
)

const (
	minTTL = time.Second
	maxTTL = 10 * time.Minute
)

// Knobs is the decorator of the knobs; maxDelay bounds Workshop-Delay (half
// the lease, the work's budget). Errors: invalid_header.
func Knobs(maxDelay time.Duration) Decorator {
	return func(r *http.Request) (Decoration, error) {
		k, err := read(r, maxDelay)
		if err != nil || k == (knobs{}) {
			return Decoration{}, err
		}
		d := Decoration{TwoPhase: true, TTL: k.ttl, DropAnswer: k.drop}
		if k.delay > 0 || k.fail {
			d.Hold = k.hold
		}
		return d, nil
	}
}

// Off is the decorator of a server without the knobs: it refuses them.
// Errors: workshop_disabled.
func Off(r *http.Request) (Decoration, error) {
	for _, h := range []string{HeaderDelay, HeaderFail, HeaderDropResponse, HeaderTTL} {
		if r.Header.Get(h) != "" {
			return Decoration{}, apperr.Errorf(apperr.WorkshopDisabled, "start the server with WORKSHOP=true to use the Workshop-* headers")
		}
	}
	return Decoration{}, nil
}

// knobs are one request's settings.
type knobs struct {
	delay time.Duration
	fail  bool
	drop  bool
	ttl   time.Duration // 0: the server's
}

// read reads the knobs of r. Errors: invalid_header.
func read(r *http.Request, maxDelay time.Duration) (knobs, error) {
	var k knobs
	var err error
	if v := r.Header.Get(HeaderDelay); v != "" {
		if k.delay, err = time.ParseDuration(v); err != nil || k.delay < 0 || k.delay >= maxDelay {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be a duration below %s (half the lease), such as %s", HeaderDelay, maxDelay, maxDelay/2)
		}
	}
	k.fail = r.Header.Get(HeaderFail) == "after-claim"
	if !k.fail && r.Header.Get(HeaderFail) != "" {
		return k, apperr.Errorf(apperr.InvalidHeader, "%s must be after-claim", HeaderFail)
	}
	if v := r.Header.Get(HeaderDropResponse); v != "" {
		if k.drop, err = strconv.ParseBool(v); err != nil {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be true or false", HeaderDropResponse)
		}
	}
	if v := r.Header.Get(HeaderTTL); v != "" {
		if k.ttl, err = time.ParseDuration(v); err != nil || k.ttl < minTTL || k.ttl > maxTTL {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be a duration from %s to %s, such as 5s", HeaderTTL, minTTL, maxTTL)
		}
	}
	return k, nil
}

// hold runs inside the work, before it decides.
func (k knobs) hold(ctx context.Context) error {
	if k.delay > 0 {
		select {
		case <-time.After(k.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if k.fail {
		return &apperr.Error{Code: apperr.Unavailable, Message: "the work failed after the claim (Workshop-Fail); the key was released, retry it", RetryAfter: time.Second}
	}
	return nil
}
