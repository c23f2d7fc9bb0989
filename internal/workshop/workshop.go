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
)

// Decorator changes an attempt before it runs (the knobs): it may refuse it,
// nothing stored, or change its request (its path, its TTL). The knobs
// decorate an operation from outside: the operation and the Runner stay as
// in production, and a request without knobs is not touched.
type Decorator func(r *http.Request, req *idempotency.Request) (Decoration, error)

// Decoration is what a Decorator does to one attempt.
type Decoration struct {
	Hold       func(context.Context) error // runs inside the work before it decides
	DropAnswer bool                        // closes the connection without the answer
}

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
	return func(r *http.Request, req *idempotency.Request) (Decoration, error) {
		k, err := read(r, maxDelay)
		if err != nil || k == (knobs{}) {
			return Decoration{}, err
		}
		if req.Path == idempotency.OnePhase {
			req.Path = idempotency.TwoPhase
		}
		if k.ttl > 0 {
			req.TTL = k.ttl
		}
		d := Decoration{DropAnswer: k.drop}
		if k.delay > 0 || k.fail {
			d.Hold = k.hold
		}
		return d, nil
	}
}

// Off is the decorator of a server without the knobs: it refuses them.
// Errors: workshop_disabled.
func Off(r *http.Request, _ *idempotency.Request) (Decoration, error) {
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
