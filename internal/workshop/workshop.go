// Package workshop is the workshop's knobs: request headers that reproduce
// each branch of the contract on demand, on any idempotent operation. They
// decorate an operation's work (httpapi.Decorator): serve installs Knobs
// when WORKSHOP=true, and Off, which refuses them, when not.
package workshop

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// The knobs. A request that carries one takes the two-phase path when its
// operation would take the one-phase path, so that it has a claim to hold,
// fail or answer late.
const (
	// HeaderDelay holds the work after the claim, e.g. "10s": meanwhile a
	// retry with the same key gets 409 operation_in_progress.
	HeaderDelay = "Workshop-Delay"
	// HeaderFail, "after-claim", fails the work after the claim: the claim is
	// released and the answer is 503, so the same key can run again.
	HeaderFail = "Workshop-Fail"
	// HeaderDropResponse, "true", closes the connection after the finish
	// committed, without a response: the lost response a retry recovers.
	HeaderDropResponse = "Workshop-Drop-Response"
	// HeaderTTL, a duration from MinTTL to MaxTTL such as "5s", makes the
	// key of this request, if it writes it, replayed that long instead of
	// the server's TTL: expiry shown without a restart.
	HeaderTTL = "Workshop-TTL"
)

// The bounds of Workshop-TTL.
const (
	MinTTL = time.Second
	MaxTTL = 10 * time.Minute
)

// Knobs is the decorator of the knobs; maxDelay bounds Workshop-Delay (half
// the lease, the work's budget). Errors: invalid_header.
func Knobs(maxDelay time.Duration) httpapi.Decorator {
	return func(r *http.Request, req *idempotency.Request) (httpapi.Decoration, error) {
		var d httpapi.Decoration
		k, err := read(r, maxDelay)
		if err != nil || !k.set() {
			return d, err
		}
		if req.Path == idempotency.OnePhase {
			req.Path = idempotency.TwoPhase
		}
		if k.ttl > 0 {
			req.TTL = k.ttl
		}
		if k.delay > 0 || k.fail {
			d.Hold = k.hold
		}
		d.DropAnswer = k.drop
		return d, nil
	}
}

// Off is the decorator of a server without the knobs: a request that
// carries one is refused, saying how to turn them on. Errors:
// workshop_disabled.
func Off(r *http.Request, _ *idempotency.Request) (httpapi.Decoration, error) {
	for _, h := range []string{HeaderDelay, HeaderFail, HeaderDropResponse, HeaderTTL} {
		if r.Header.Get(h) != "" {
			return httpapi.Decoration{}, apperr.Errorf(apperr.WorkshopDisabled, "start the server with WORKSHOP=true to use the Workshop-* headers")
		}
	}
	return httpapi.Decoration{}, nil
}

// knobs are one request's settings.
type knobs struct {
	delay time.Duration
	fail  bool
	drop  bool
	ttl   time.Duration // 0: the server's
}

func (k knobs) set() bool { return k.delay > 0 || k.fail || k.drop || k.ttl > 0 }

// read reads the knobs of r. Errors: invalid_header.
func read(r *http.Request, maxDelay time.Duration) (knobs, error) {
	var k knobs
	var err error
	if v := r.Header.Get(HeaderDelay); v != "" {
		if k.delay, err = time.ParseDuration(v); err != nil || k.delay < 0 || k.delay >= maxDelay {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be a duration below %s (half the lease), such as %s", HeaderDelay, maxDelay, maxDelay/2)
		}
	}
	switch r.Header.Get(HeaderFail) {
	case "":
	case "after-claim":
		k.fail = true
	default:
		return k, apperr.Errorf(apperr.InvalidHeader, "%s must be after-claim", HeaderFail)
	}
	if v := r.Header.Get(HeaderDropResponse); v != "" {
		if k.drop, err = strconv.ParseBool(v); err != nil {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be true or false", HeaderDropResponse)
		}
	}
	if v := r.Header.Get(HeaderTTL); v != "" {
		if k.ttl, err = time.ParseDuration(v); err != nil || k.ttl < MinTTL || k.ttl > MaxTTL {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be a duration from %s to %s, such as 5s", HeaderTTL, MinTTL, MaxTTL)
		}
	}
	return k, nil
}

// hold runs inside the work, before it decides: the delay, then the
// failure.
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
