package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// operation is everything the transport needs to make one operation safe to
// retry. In is its decoded input, Out what it decides. idempotent turns it
// into a handler; the key, scope, fingerprint, claim, replay, conflict,
// release, waiting and rendering are done there, once for every operation.
type operation[In, Out any] struct {
	// method and pattern are its route, e.g. POST /v1/demo-requests.
	method, pattern string
	// name scopes the keys, e.g. "demo-requests.create".
	name string
	// path is idempotency.OnePhase when the work is a database write decided
	// in Go beforehand, TwoPhase when it runs outside the database. Requests
	// with workshop knobs always take the two-phase path.
	path idempotency.Path
	// decode reads and validates the request before anything is claimed:
	// its errors are answered and nothing is stored.
	decode func(w http.ResponseWriter, r *http.Request) (In, error)
	// significant returns the fields that make two requests the same intent.
	significant func(In) map[string]any
	// decide decides the operation at now, without writing anything. An
	// *apperr.Error of a 4xx is a definite refusal: stored and replayed like
	// a success. Any other error is transient.
	decide func(ctx context.Context, actor string, in In, now time.Time) (Out, error)
	// render turns what was decided into the answer to store and send.
	render func(Out) (idempotency.Response, error)
	// effect names the business change that commits with the answer: a
	// statement file of the store's (postgres: sql/effect/<name>.sql), looked
	// up when the server is made (Writes.Effect).
	effect string
	// args are the effect's own parameters, in the order its file lists them.
	args func(Out) []any
}

// route is one idempotent route of the API: the operations (operations.go
// lists them) feed both the router and the outcome route.
type route struct {
	method, pattern string
	operation       string
	stepWise        bool // an operation of several steps, with a run beside its key
	handler         http.Handler
}

// idempotentRoute is the route of op, or an error naming what op lacks or
// the effect the store does not have: an operation declared half-way is
// refused when the server is made, not on its first request.
func idempotentRoute[In, Out any](s *server, op operation[In, Out]) (route, error) {
	if err := op.check(); err != nil {
		return route{}, err
	}
	write, err := s.Writes.Effect(op.effect)
	if err != nil {
		return route{}, fmt.Errorf("httpapi: operation %s: %w", op.name, err)
	}
	return route{method: op.method, pattern: op.pattern, operation: op.name, handler: idempotent(s, op, write)}, nil
}

// check reports an operation that lacks a part, by its name.
func (op operation[In, Out]) check() error {
	var missing []string
	for _, p := range []struct {
		part   string
		absent bool
	}{
		{"a method and pattern", op.method == "" || op.pattern == ""},
		{"a path (one_phase or two_phase)", op.path != idempotency.OnePhase && op.path != idempotency.TwoPhase},
		{"decode", op.decode == nil},
		{"significant", op.significant == nil},
		{"decide", op.decide == nil},
		{"render", op.render == nil},
		{"effect", op.effect == ""},
		{"args", op.args == nil},
	} {
		if p.absent {
			missing = append(missing, p.part)
		}
	}
	switch {
	case op.name == "":
		return errors.New("httpapi: an operation without a name")
	case len(missing) > 0:
		return fmt.Errorf("httpapi: operation %s lacks %s", op.name, strings.Join(missing, ", "))
	}
	return nil
}

// Request headers of the client side of the contract.
const (
	// HeaderClientAttempt is the client's attempt number for one intent
	// (1, 2, …): logged, and counted when the intent gets its answer.
	HeaderClientAttempt = "X-Client-Attempt"
	// maxClientAttempt bounds a sane attempt number.
	maxClientAttempt = 1000
)

// idempotent is the handler of op, whose effect write makes.
func idempotent[In, Out any](s *server, op operation[In, Out], write func(args ...any) idempotency.Effect) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, err := readIntent(s, w, r, op.name, op.path, op.decode, op.significant)
		if err != nil {
			writeError(s.Logger, w, r, err)
			return
		}
		if s.Path != "" {
			it.req.Path = s.Path
		}
		if it.knobs.set() {
			it.req.Path = idempotency.TwoPhase
		}
		res, err := s.idem.Do(r.Context(), it.req, func(ctx context.Context, now time.Time) (idempotency.Decided, error) {
			if err := it.knobs.afterClaim(ctx); err != nil {
				return idempotency.Decided{}, err
			}
			out, err := op.decide(ctx, it.req.Scope.Actor, it.in, now)
			if refusal, ok := errors.AsType[*apperr.Error](err); ok && render(refusal).Status < 500 {
				return idempotency.Decided{Response: render(refusal)}, nil
			} else if err != nil {
				return idempotency.Decided{}, err
			}
			resp, err := op.render(out)
			if err != nil {
				return idempotency.Decided{}, err
			}
			return idempotency.Decided{Response: resp, Effect: write(op.args(out)...)}, nil
		})
		s.answer(w, r, it.req.Scope, it.attempt, it.knobs, res, err)
	})
}

// intent is what the transport reads of an idempotent request before
// anything runs: the Runner's request, the decoded input, the client's
// attempt number and the workshop knobs.
type intent[In any] struct {
	req     idempotency.Request
	in      In
	attempt int
	knobs   knobs
}

// readIntent reads and checks r as an attempt at operation name. Its errors
// are answered, and nothing is stored.
func readIntent[In any](s *server, w http.ResponseWriter, r *http.Request, name string, path idempotency.Path,
	decode func(http.ResponseWriter, *http.Request) (In, error), significant func(In) map[string]any) (intent[In], error) {
	var it intent[In]
	key, err := idempotency.ParseKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		return it, err
	}
	scope := idempotency.Scope{Actor: actorOf(r), Operation: name, Key: key}
	noteKey(r, scope)
	if it.attempt, err = clientAttempt(r); err != nil {
		return it, err
	}
	if it.in, err = decode(w, r); err != nil {
		return it, err
	}
	if it.knobs, err = s.workshop().knobs(r, path); err != nil {
		return it, err
	}
	fp, err := idempotency.Fingerprint(significant(it.in))
	if err != nil {
		return it, err
	}
	it.req = idempotency.Request{Scope: scope, Fingerprint: fp, Path: path, Wait: preferWait(r), Retry: it.attempt >= 2,
		StopAfter: it.knobs.stopAfter, TTL: it.knobs.ttl}
	return it, nil
}

// answer writes the Runner's result res of an attempt at scope, or its
// error.
func (s *server) answer(w http.ResponseWriter, r *http.Request, scope idempotency.Scope, attempt int, k knobs, res idempotency.Result, err error) {
	li := info(r)
	li.outcome, li.path = res.Outcome, res.Path
	if definite := err == nil || apperr.Code(err) == apperr.KeyPayloadMismatch; definite && attempt > 0 && s.Metrics != nil {
		s.Metrics.Answered(scope.Operation, attempt)
	}
	switch {
	case errors.Is(err, idempotency.ErrStopped):
		dropConnection(s.Logger, w, r) // the runner "died" after the step
		return
	case err != nil:
		if apperr.Code(err) == apperr.OperationInProgress {
			w.Header().Set("Link", "<"+outcomeURL(scope)+`>; rel="monitor"`)
		}
		writeError(s.Logger, w, r, err)
		return
	case k.dropResponse:
		dropConnection(s.Logger, w, r)
		return
	}
	if res.Waited {
		w.Header().Set("Preference-Applied", "wait")
	}
	writeResponse(w, res.Response, res.Replayed)
}

// outcomeURL is the outcome route of scope, where a client asks what became
// of its key.
func outcomeURL(s idempotency.Scope) string {
	return "/v1/idempotency-keys/" + url.PathEscape(s.Key) + "?operation=" + url.QueryEscape(s.Operation)
}

// clientAttempt reads X-Client-Attempt: 0 when absent.
//
// Errors: invalid_header.
func clientAttempt(r *http.Request) (int, error) {
	v := r.Header.Values(HeaderClientAttempt)
	if len(v) == 0 {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v[0]))
	if len(v) > 1 || err != nil || n < 1 || n > maxClientAttempt {
		return 0, apperr.Errorf(apperr.InvalidHeader, "%s must be sent once, as a whole number from 1 to %d", HeaderClientAttempt, maxClientAttempt)
	}
	info(r).attempt = n
	return n, nil
}

// preferWait reads the wait preference of RFC 7240 (Prefer: wait=10), in
// any Prefer header among other preferences. A preference the server does
// not understand is ignored, as the RFC asks.
func preferWait(r *http.Request) time.Duration {
	for _, h := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			if n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`)); err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}
