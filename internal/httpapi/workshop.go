package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
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
	// HeaderStopAfter, the name of a step of an operation of several steps
	// (such as "slot_reserved"), ends the run after that step as if its
	// runner died there: the connection closes without an answer, and the
	// run waits at its recovery point, its lease passed, for the next retry
	// or the completer to resume it. A request that carries it for a run
	// already past that step (the stopped request sent again unchanged, as
	// a browser does on a reused connection) runs nothing and stops there
	// too: only a retry without it resumes the run.
	HeaderStopAfter = "Workshop-Stop-After"
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

func (s *server) workshop() workshop {
	return workshop{enabled: s.Workshop, maxDelay: s.idem.WorkBudget(), afterClaim: s.InWork}
}

// knobs are one request's workshop settings.
type knobs struct {
	delay        time.Duration
	fail         bool
	dropResponse bool
	stopAfter    string
	ttl          time.Duration               // Workshop-TTL; 0: the server's
	hook         func(context.Context) error // the test seam, bound to the request
}

// set reports whether the request carries a workshop knob.
func (k knobs) set() bool { return k.delay > 0 || k.fail || k.dropResponse || k.ttl > 0 }

// knobs reads the workshop headers of r, an attempt at an operation on
// path. Errors: workshop_disabled, invalid_header.
func (ws workshop) knobs(r *http.Request, path idempotency.Path) (knobs, error) {
	var k knobs
	if ws.afterClaim != nil {
		k.hook = func(ctx context.Context) error { return ws.afterClaim(ctx, r) }
	}
	delay, fail, drop := r.Header.Get(HeaderDelay), r.Header.Get(HeaderFail), r.Header.Get(HeaderDropResponse)
	k.stopAfter = r.Header.Get(HeaderStopAfter)
	ttl := r.Header.Get(HeaderTTL)
	if delay == "" && fail == "" && drop == "" && k.stopAfter == "" && ttl == "" {
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
	if k.stopAfter != "" && path != idempotency.StepWise {
		return k, apperr.Errorf(apperr.InvalidHeader, "%s applies only to an operation of several steps", HeaderStopAfter)
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

// wrap returns op with the knobs' delay, failure and test seam run inside
// its first step, before it decides, when the request has any: the
// completer runs op itself, without them.
func (k knobs) wrap(op *idempotency.Steps) *idempotency.Steps {
	if k.hook == nil && k.delay == 0 && !k.fail {
		return op
	}
	o := *op
	o.Steps = append([]idempotency.Step(nil), op.Steps...)
	first := o.Steps[0].Local
	o.Steps[0].Local = func(ctx context.Context, run *idempotency.Run, now time.Time) (idempotency.Effect, error) {
		if err := k.afterClaim(ctx); err != nil {
			return nil, err
		}
		return first(ctx, run, now)
	}
	return &o
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

// maxDeskFaults bounds the body of PUT /workshop/desk-faults.
const maxDeskFaults = 4 << 10

// handleDeskFaults is PUT /workshop/desk-faults: it hands a JSON object of
// the review desk's faults ({"down":true}, {} to clear) to the desk, so
// that the workshop page, which calls only this origin, can make the
// external call stick. The faults are the caller's own: aimed at the
// calls the desk gets for the caller's requests (its "account"), set and
// cleared apart from everyone else's, so that in a workshop room one
// participant's faults never touch another's deliveries. It is routed only
// with the workshop on.
//
// Errors: malformed_json, body_too_large, workshop_disabled (the desk
// refuses its knobs), invalid_field (another account, or the desk refuses
// these faults, such as a delay that is not a duration), unavailable.
func handleDeskFaults(logger *slog.Logger, set func(context.Context, json.RawMessage) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeskFaults))
		var obj map[string]json.RawMessage
		switch {
		case errors.As(err, new(*http.MaxBytesError)):
			err = apperr.Errorf(apperr.BodyTooLarge, "the faults must be at most %d bytes", maxDeskFaults)
		case err == nil && (json.Unmarshal(b, &obj) != nil || obj == nil):
			err = apperr.Errorf(apperr.MalformedJSON, "send the desk's faults as a JSON object, such as {\"down\":true}, or {} to clear them")
		case err == nil:
			if b, err = ownFaults(obj, actorOf(r)); err == nil {
				err = set(r.Context(), b)
			}
		}
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, json.RawMessage(b))
	})
}

// ownFaults is the desk's faults obj aimed at actor's account. Errors:
// invalid_field when obj names another account.
func ownFaults(obj map[string]json.RawMessage, actor string) ([]byte, error) {
	mine, err := json.Marshal(actor)
	if err != nil {
		return nil, err
	}
	if a, ok := obj["account"]; ok {
		var named string
		if json.Unmarshal(a, &named) != nil || named != actor {
			return nil, apperr.Errorf(apperr.InvalidField, "account: you set the faults of your own account only; leave it out")
		}
	}
	obj["account"] = mine
	return json.Marshal(obj)
}
