package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

// Workshop headers reproduce each branch on demand. They are refused unless
// the server runs with the workshop enabled. A request that carries one takes
// the two-phase path (claim, work, finish), so that it has a claim to hold,
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
	// HeaderTTL, a duration from MinWorkshopTTL to MaxWorkshopTTL such as
	// "5s", makes the key of this request, if it claims it, replayed that
	// long instead of the server's TTL: expiry shown without a restart.
	HeaderTTL = "Workshop-TTL"
)

// The bounds of Workshop-TTL.
const (
	MinWorkshopTTL = time.Second
	MaxWorkshopTTL = 10 * time.Minute
)

// workshop is the server's switch, and its test seam.
type workshop struct {
	enabled    bool
	maxDelay   time.Duration
	afterClaim func(context.Context, *http.Request) error
}

func (s *Server) workshop() workshop {
	return workshop{enabled: s.Workshop, maxDelay: s.idem.WorkBudget(), afterClaim: s.InWork}
}

// knobs are one request's workshop settings.
type knobs struct {
	delay        time.Duration
	fail         bool
	dropResponse bool
	ttl          time.Duration               // Workshop-TTL; 0: the server's
	hook         func(context.Context) error // the test seam, bound to the request
}

// set reports whether the request carries a workshop knob.
func (k knobs) set() bool { return k.delay > 0 || k.fail || k.dropResponse || k.ttl > 0 }

// knobs reads the workshop headers of r. Errors: workshop_disabled,
// invalid_header.
func (ws workshop) knobs(r *http.Request) (knobs, error) {
	var k knobs
	if ws.afterClaim != nil {
		k.hook = func(ctx context.Context) error { return ws.afterClaim(ctx, r) }
	}
	delay, fail, drop := r.Header.Get(HeaderDelay), r.Header.Get(HeaderFail), r.Header.Get(HeaderDropResponse)
	ttl := r.Header.Get(HeaderTTL)
	if delay == "" && fail == "" && drop == "" && ttl == "" {
		return k, nil
	}
	if !ws.enabled {
		return k, apperr.Errorf(apperr.WorkshopDisabled, "start the server with WORKSHOP=true to use the Workshop-* headers")
	}
	var err error
	if delay != "" {
		if k.delay, err = time.ParseDuration(delay); err != nil || k.delay < 0 || k.delay >= ws.maxDelay {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be a duration below %s (half the lease), such as %s", HeaderDelay, ws.maxDelay, ws.maxDelay/2)
		}
	}
	switch fail {
	case "":
	case "after-claim":
		k.fail = true
	default:
		return k, apperr.Errorf(apperr.InvalidHeader, "%s must be after-claim", HeaderFail)
	}
	if drop != "" {
		if k.dropResponse, err = strconv.ParseBool(drop); err != nil {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be true or false", HeaderDropResponse)
		}
	}
	if ttl != "" {
		if k.ttl, err = time.ParseDuration(ttl); err != nil || k.ttl < MinWorkshopTTL || k.ttl > MaxWorkshopTTL {
			return k, apperr.Errorf(apperr.InvalidHeader, "%s must be a duration from %s to %s, such as 5s", HeaderTTL, MinWorkshopTTL, MaxWorkshopTTL)
		}
	}
	return k, nil
}

// afterClaim runs inside the work, before it decides: after the claim on the
// two-phase path, before the one statement on the one-phase path.
func (k knobs) afterClaim(ctx context.Context) error {
	if k.hook != nil {
		if err := k.hook(ctx); err != nil {
			return err
		}
	}
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

// hold is afterClaim when the request has a knob or the test seam, for an
// operation that runs itself (Attempt.Hold); nil otherwise.
func (k knobs) hold() func(context.Context) error {
	if k.hook == nil && k.delay == 0 && !k.fail {
		return nil
	}
	return k.afterClaim
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
