// Package accesslog is the operator's view of the requests: one line per
// request, its metrics, and an outage's 503s summed up in a few lines
// (outage.go). Handlers fill in the Note of their request (Of); Requests
// logs it once the answer is sent. The idempotency contract does not need
// any of it: it is a layer around the handlers, composed where the server
// is built.
package accesslog

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tracing"
)

// Note is what the request line logs; handlers fill it in. One line per
// request, written once the answer is sent, holds everything an operator
// needs to follow a key: its hash, the outcome, the path, the attempt.
type Note struct {
	Actor     string
	KeyHash   string
	Operation string // the idempotent operation of the key
	Outcome   idempotency.Outcome
	Path      idempotency.Path
	Attempt   int // X-Client-Attempt
	Code      string
	Dropped   bool // the connection was closed without an answer (Workshop-Drop-Response)
	// ClientGone: the client left before the answer, and the request ended for it.
	ClientGone  bool
	Unavailable error  // the error of a 503, for the outage's log
	Cause       string // what the 503 told the client: the outage it belongs to
	metrics     Metrics
}

type noteKey struct{}

// Of is the Note of r; outside Requests, a Note nobody logs.
func Of(r *http.Request) *Note {
	if n, ok := r.Context().Value(noteKey{}).(*Note); ok {
		return n
	}
	return &Note{}
}

// Logged reports whether r's Note is logged (r passed through Requests).
func Logged(r *http.Request) bool {
	_, ok := r.Context().Value(noteKey{}).(*Note)
	return ok
}

// NoteKey records a hash of the scope for the log: the raw key never is. A
// key may be guessable or carry a client's data; its hash still lets an
// operator find every line of one intent.
func NoteKey(r *http.Request, s idempotency.Scope) {
	sum := sha256.Sum256([]byte(s.Actor + "\x00" + s.Operation + "\x00" + s.Key))
	n := Of(r)
	n.KeyHash, n.Operation = hex.EncodeToString(sum[:8]), s.Operation
}

// Answer notes the Runner's outcome and path for r's line. A definite
// answer (a result or a mismatch) counts the client's attempt number at
// once, before the answer is sent: it tells how many attempts an intent needed.
func Answer(r *http.Request, o idempotency.Outcome, p idempotency.Path, definite bool) {
	n := Of(r)
	n.Outcome, n.Path = o, p
	if definite && n.Attempt > 0 && n.metrics != nil {
		n.metrics.Answered(n.Operation, n.Attempt)
	}
}

// ReqID is chi's id of the HTTP request, req_id in the log: request_id is the
// resource's id, and make rename RESOURCE= renames it with the resource.
func ReqID(r *http.Request) string { return middleware.GetReqID(r.Context()) }

// Route is the route pattern the router matched r to, or "unmatched".
func Route(r *http.Request) string {
	return cmp.Or(chi.RouteContext(r.Context()).RoutePattern(), "unmatched")
}

// Metrics is what Requests reports each request to; nil reports nothing.
type Metrics interface {
	Request(route, status string, d time.Duration)
	Answered(operation string, n int) // an intent's definite answer at the client's attempt n
}

// Requests logs one line per request, and reports it to m. A response that
// was never sent (the workshop dropped it, or the client left) is logged as
// such, not as the 200 net/http would otherwise report. The 503s of an
// outage are summed up in a few lines of their own (outage).
func Requests(logger *slog.Logger, m Metrics) func(http.Handler) http.Handler {
	outage := newOutage(logger, outageEvery)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			n := &Note{metrics: m}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), noteKey{}, n)))
			n.end(logger, r, time.Since(start), ww.Status())
			if n.Unavailable != nil {
				outage.answered(r.Context(), n.Cause, n.Unavailable)
			}
		})
	}
}

// end counts r's answer, written with status after d, and logs its line,
// with what the handler noted. It is a function of its own so that what it
// holds takes no room on the stack while the handler runs.
func (n *Note) end(logger *slog.Logger, r *http.Request, d time.Duration, status int) {
	route := Route(r)
	status = cmp.Or(status, http.StatusOK) // nothing written: net/http sends 200
	label := strconv.Itoa(status)
	switch {
	case n.Dropped:
		status, label = 0, "dropped" // no answer was sent
	case n.ClientGone:
		status, label = 0, "client_gone" // no one to answer
	}
	attrs := []slog.Attr{
		slog.String("req_id", ReqID(r)),
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Duration("duration", d),
	}
	add := func(set bool, a slog.Attr) {
		if set {
			attrs = append(attrs, a)
		}
	}
	add(n.Dropped, slog.Bool("response_dropped", true))
	add(n.ClientGone, slog.Bool("client_gone", true))
	add(n.Actor != "", slog.String("actor", n.Actor))
	add(n.KeyHash != "", slog.String("key_hash", n.KeyHash))
	add(n.Outcome != "", slog.String("outcome", string(n.Outcome)))
	add(n.Outcome != "", slog.String("path", string(n.Path)))
	add(n.Attempt > 0, slog.Int("client_attempt", n.Attempt))
	add(n.Code != "", slog.String("code", n.Code))
	traceID := tracing.TraceID(r.Context())
	add(traceID != "", slog.String("trace_id", traceID))
	if n.metrics != nil { // before the line: whoever reads the line finds it counted
		n.metrics.Request(route, label, d)
	}
	logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}
