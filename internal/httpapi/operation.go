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

// Operation is everything the transport needs to make one operation safe to
// retry: In is its decoded input, Out what it decides. Idempotent turns it
// into a route that handles the key, replay, conflict and waiting once for
// every operation.
type Operation[In, Out any] struct {
	// Method and Pattern are its route, e.g. POST /v1/demo-requests.
	Method, Pattern string
	// Name scopes the keys, e.g. "demo-requests.create".
	Name string
	// Path is idempotency.OnePhase for a database write decided beforehand,
	// TwoPhase for a work outside the database (a Decorator may change it).
	Path idempotency.Path
	// Decode reads and validates the request before anything is claimed:
	// its errors are answered and nothing is stored.
	Decode func(w http.ResponseWriter, r *http.Request) (In, error)
	// Significant returns the fields that make two requests the same intent.
	Significant func(In) map[string]any
	// Decide decides at now, without writing. An *apperr.Error of a 4xx is a
	// refusal, stored and replayed like a success; any other error is transient.
	Decide func(ctx context.Context, actor string, in In, now time.Time) (Out, error)
	// Render turns what was decided into the answer to store and send.
	Render func(Out) (idempotency.Response, error)
	// Effect is the business change that commits with the answer, made by
	// the store (postgres: Store.CreateDemoRequest).
	Effect func(Out) idempotency.Effect
	// Outcome, if set, is what the outcome route shows beside a key of this
	// operation ("run").
	Outcome func(ctx context.Context, s idempotency.Scope) (any, error)
}

// Route is one route of the API behind authentication.
type Route struct {
	Method, Pattern string
	Handler         http.Handler
	// Operation is the idempotent operation it serves, "" for none: the
	// outcome route knows each by its name.
	Operation string
	outcome   func(ctx context.Context, s idempotency.Scope) (any, error)
}

// Idempotent is the route of op, or an error naming what op lacks, so a
// half-declared operation fails when the server is made, not on a request.
func Idempotent[In, Out any](s *Server, op Operation[In, Out]) (Route, error) {
	if err := op.check(); err != nil {
		return Route{}, err
	}
	return Route{Method: op.Method, Pattern: op.Pattern, Operation: op.Name, Handler: idempotent(s, op), outcome: op.Outcome}, nil
}

// check reports an operation that lacks a part, by its name.
func (op Operation[In, Out]) check() error {
	var missing []string
	for _, p := range []struct {
		part   string
		absent bool
	}{
		{"a method and pattern", op.Method == "" || op.Pattern == ""},
		{"a path", op.Path == ""},
		{"Decode", op.Decode == nil},
		{"Significant", op.Significant == nil},
		{"Decide", op.Decide == nil},
		{"Render", op.Render == nil},
		{"Effect", op.Effect == nil},
	} {
		if p.absent {
			missing = append(missing, p.part)
		}
	}
	switch {
	case op.Name == "":
		return errors.New("httpapi: an operation without a name")
	case len(missing) > 0:
		return fmt.Errorf("httpapi: operation %s lacks %s", op.Name, strings.Join(missing, ", "))
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

func idempotent[In, Out any](s *Server, op Operation[In, Out]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, err := ReadIntent(s, w, r, op)
		if err != nil {
			WriteError(s.Logger, w, r, err)
			return
		}
		res, err := s.do(r.Context(), it.Request, func(ctx context.Context, _ idempotency.Claim, now time.Time) (idempotency.Answer, error) {
			if it.Hold != nil {
				if err := it.Hold(ctx); err != nil {
					return idempotency.Answer{}, err
				}
			}
			out, err := op.Decide(ctx, it.Request.Scope.Actor, it.In, now)
			if refusal, ok := errors.AsType[*apperr.Error](err); ok && Render(refusal).Status < 500 {
				return idempotency.Answer{Response: Render(refusal)}, nil
			} else if err != nil {
				return idempotency.Answer{}, err
			}
			resp, err := op.Render(out)
			if err != nil {
				return idempotency.Answer{}, err
			}
			return idempotency.Answer{Response: resp, Effect: op.Effect(out)}, nil
		})
		Respond(s, w, r, it, res, err)
	})
}

// Intent is an attempt at an operation as the transport read it, before
// anything runs. ReadIntent and Respond are the parts of every idempotent
// route: an operation that runs its attempts its own way builds its
// handler from them.
type Intent[In any] struct {
	Request idempotency.Request
	In      In
	// Hold, if set, runs inside the work before it decides: the
	// decoration's (Deps.Decorate) and the tests' seam (Deps.InWork).
	Hold    func(context.Context) error
	attempt int
	drop    bool
}

// ReadIntent reads and checks r as an attempt at op. Its errors are to be
// answered, and nothing is stored.
func ReadIntent[In, Out any](s *Server, w http.ResponseWriter, r *http.Request, op Operation[In, Out]) (Intent[In], error) {
	var it Intent[In]
	key, err := idempotency.ParseKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		return it, err
	}
	scope := idempotency.Scope{Actor: ActorOf(r), Operation: op.Name, Key: key}
	noteKey(r, scope)
	if it.attempt, err = clientAttempt(r); err != nil {
		return it, err
	}
	if it.In, err = op.Decode(w, r); err != nil {
		return it, err
	}
	fp, err := idempotency.Fingerprint(op.Significant(it.In))
	if err != nil {
		return it, err
	}
	it.Request = idempotency.Request{Scope: scope, Fingerprint: fp, Path: op.Path, Wait: preferWait(r), Retry: it.attempt >= 2}
	if s.Path != "" {
		it.Request.Path = s.Path
	}
	var d Decoration
	if s.Decorate != nil {
		if d, err = s.Decorate(r, &it.Request); err != nil {
			return it, err
		}
	}
	it.Hold, it.drop = s.hold(r, d), d.DropAnswer
	return it, nil
}

// Respond writes the Runner's result res for it, or its error.
func Respond[In any](s *Server, w http.ResponseWriter, r *http.Request, it Intent[In], res idempotency.Result, err error) {
	scope := it.Request.Scope
	li := info(r)
	li.outcome, li.path = res.Outcome, res.Path
	if definite := err == nil || apperr.Code(err) == apperr.KeyPayloadMismatch; definite && it.attempt > 0 && s.Metrics != nil {
		s.Metrics.Answered(scope.Operation, it.attempt)
	}
	switch {
	case err != nil:
		if apperr.Code(err) == apperr.OperationInProgress {
			w.Header().Set("Link", "<"+outcomeURL(scope)+`>; rel="monitor"`)
		}
		WriteError(s.Logger, w, r, err)
		return
	case it.drop:
		dropConnection(s.Logger, w, r)
		return
	}
	if res.Waited {
		w.Header().Set("Preference-Applied", "wait")
	}
	writeResponse(w, res.Response, res.Replayed)
}

// outcomeURL is where a client asks what became of its key.
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

// preferWait reads Prefer: wait=N (RFC 7240) from any Prefer header; other
// preferences are ignored, as the RFC asks.
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
