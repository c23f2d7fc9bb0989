package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
)

// Operation is what the transport needs to make one operation safe to
// retry: In is its decoded input, Out what it decides. A new operation
// declares these parts and gets the whole contract (claim, replay, in
// progress, mismatch, expiry) from Idempotent, without copying any of it.
//
// The parts run in this order: Decode and Significant before the key is
// touched (bad input stores nothing), then, inside the Runner's work, Decide,
// Render and Effect. Decide must not write: what it decides is committed by
// the Runner's statement together with the key, so that a crash between the
// two cannot leave one without the other.
type Operation[In, Out any] struct {
	Method, Pattern string           // its route, e.g. POST /v1/demo-requests
	Name            string           // scopes the keys, e.g. "demo-requests.create"
	Path            idempotency.Path // OnePhase for a database write, TwoPhase for a work outside it
	// Decode reads and validates the request; its errors are answered, nothing stored.
	Decode      func(w http.ResponseWriter, r *http.Request) (In, error)
	Significant func(In) map[string]any // the fields that make two requests the same intent
	// Decide decides at now, without writing: an *apperr.Error of a 4xx is a
	// refusal, stored and replayed; any other error is transient.
	Decide func(ctx context.Context, actor string, in In, now time.Time) (Out, error)
	Render func(Out) (idempotency.Response, error) // the answer to store and send
	Effect func(Out) idempotency.Effect            // the business change that commits with the answer
}

// Route is one route of the API behind authentication. Operation names the
// scope its keys are stored under, which the outcome route asks about.
type Route struct {
	Method, Pattern string
	Handler         http.Handler
	Operation       string // the idempotent operation it serves, by name; "" for none
	// Outcome, if set, is what the outcome route shows beside a key ("run").
	Outcome func(ctx context.Context, s idempotency.Scope) (any, error)
}

// Idempotent is the route of op, or an error naming what op lacks.
func Idempotent[In, Out any](s *Server, op Operation[In, Out]) (Route, error) {
	if err := op.check(); err != nil {
		return Route{}, err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, err := ReadIntent(s, w, r, op)
		if err != nil {
			problem.Write(s.Logger, w, r, err)
			return
		}
		// The work is what the Runner runs at most once per key. A refusal
		// (a 4xx the operation decided) is an answer: it is stored and
		// replayed like a success, so a retry gets the same refusal. Any
		// other error is transient: nothing is stored, and a retry runs again.
		res, err := s.run(r.Context(), it.Request, func(ctx context.Context, now time.Time) (idempotency.Answer, error) {
			out, err := op.Decide(ctx, it.Request.Scope.Actor, it.In, now)
			if refusal, ok := errors.AsType[*apperr.Error](err); ok && problem.Render(refusal).Status < 500 {
				return idempotency.Answer{Response: problem.Render(refusal)}, nil
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
	return Route{Method: op.Method, Pattern: op.Pattern, Operation: op.Name, Handler: h}, nil
}

// check reports the parts op lacks, by name: every part is needed, and a
// zero one would panic on the first request instead of at start-up.
func (op Operation[In, Out]) check() error {
	v := reflect.ValueOf(op)
	var missing []string
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			missing = append(missing, v.Type().Field(i).Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("httpapi: operation %q lacks %s", op.Name, strings.Join(missing, ", "))
	}
	return nil
}

// Intent is an attempt as the transport read it, before anything runs (an
// operation that runs its own way uses ReadIntent and Respond). It is the
// boundary between HTTP and the Runner: what lies past it is plain Go.
type Intent[In any] struct {
	Request idempotency.Request
	In      In
}

// ReadIntent reads r as an attempt at op; its errors are answered, storing nothing.
// Everything a client can get wrong is checked here, before the Runner sees
// the key: a malformed request never claims a key, so fixing it and sending
// it again with the same key is not a mismatch.
func ReadIntent[In, Out any](s *Server, w http.ResponseWriter, r *http.Request, op Operation[In, Out]) (Intent[In], error) {
	var it Intent[In]
	key, err := idempotency.ParseKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		return it, err
	}
	scope := idempotency.Scope{Actor: ActorOf(r), Operation: op.Name, Key: key}
	accesslog.NoteKey(r, scope)
	if it.In, err = op.Decode(w, r); err != nil {
		return it, err
	}
	// The fingerprint is taken from the decoded fields, not the raw bytes:
	// key order, whitespace and display-only fields do not make another intent.
	fp, err := idempotency.Fingerprint(op.Significant(it.In))
	if err != nil {
		return it, err
	}
	it.Request = idempotency.Request{Scope: scope, Fingerprint: fp, Path: cmp.Or(s.path, op.Path), // Deps.Path first
		Wait: preferredWait(r), Retry: accesslog.Of(r).Attempt >= 2} // as readHints left them
	return it, nil
}

// Respond writes the Runner's result res for it, or its error. A 409 links
// to the outcome route (rel="monitor"), where a client whose retries ran
// out can ask what became of its key without sending the request again.
// A result or a mismatch is a definite answer: the access log counts the
// client's attempt number for it.
func Respond[In any](s *Server, w http.ResponseWriter, r *http.Request, it Intent[In], res idempotency.Result, err error) {
	accesslog.Answer(r, res.Outcome, res.Path, err == nil || apperr.Code(err) == apperr.KeyPayloadMismatch)
	if err != nil {
		if apperr.Code(err) == apperr.OperationInProgress {
			w.Header().Set("Link", "<"+outcomeURL(it.Request.Scope)+`>; rel="monitor"`)
		}
		problem.Write(s.Logger, w, r, err)
		return
	}
	if res.Waited {
		w.Header().Set("Preference-Applied", "wait")
	}
	writeResponse(w, res.Response, res.Replayed)
}

// outcomeURL is where a client asks what became of its key; the key is
// escaped, since any visible ASCII character may be in it.
func outcomeURL(s idempotency.Scope) string {
	return "/v1/idempotency-keys/" + url.PathEscape(s.Key) + "?operation=" + url.QueryEscape(s.Operation)
}

// writeResponse writes a stored or fresh response; a replay says so. The
// body is written as stored, byte for byte: a replay is the same answer, not
// a new rendering of it.
func writeResponse(w http.ResponseWriter, resp idempotency.Response, replayed bool) {
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	// Only a replay carries the header: a client, a log or a test tells a
	// repeated answer from a first one without comparing bodies.
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}
