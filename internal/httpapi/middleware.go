package httpapi

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tracing"
)

// ctxKey is the type of this package's context keys.
type ctxKey int

const (
	actorKey ctxKey = iota
	logInfoKey
)

// logInfo collects what the request line logs; handlers fill it in. One
// line per request, written once the answer is sent, holds everything an
// operator needs to follow a key: its hash, the outcome, the path, the attempt.
type logInfo struct {
	actor       string
	keyHash     string
	outcome     idempotency.Outcome
	path        idempotency.Path
	attempt     int // X-Client-Attempt
	code        string
	dropped     bool  // the connection was closed without an answer (Workshop-Drop-Response)
	clientGone  bool  // the client left before the answer, and the request ended for it
	unavailable error // the error of a 503, for the outage's log
}

func info(r *http.Request) *logInfo {
	if li, ok := r.Context().Value(logInfoKey).(*logInfo); ok {
		return li
	}
	return &logInfo{}
}

// noteKey records a hash of the scope for the log: the raw key never is. A
// key may be guessable or carry a client's data; its hash still lets an
// operator find every line of one intent.
func noteKey(r *http.Request, s idempotency.Scope) {
	sum := sha256.Sum256([]byte(s.Actor + "\x00" + s.Operation + "\x00" + s.Key))
	info(r).keyHash = hex.EncodeToString(sum[:8])
}

// reqID is chi's id of the HTTP request, req_id in the log: request_id is the
// resource's id, and make rename RESOURCE= renames it with the resource.
func reqID(r *http.Request) string { return middleware.GetReqID(r.Context()) }

// logRequests logs one line per request, and reports it to the metrics.
// A response that was never sent (the workshop dropped it, or the client
// left) is logged as such, not as the 200 net/http would otherwise report.
// The 503s of an outage are summed up in a few lines of their own (outage).
func (s *Server) logRequests(next http.Handler) http.Handler {
	outage := newOutage(s.Logger, outageEvery)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		li := &logInfo{}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), logInfoKey, li)))

		d := time.Since(start)
		route := routeOf(r)
		status := cmp.Or(ww.Status(), http.StatusOK) // nothing written: net/http sends 200
		label := strconv.Itoa(status)
		switch {
		case li.dropped:
			status, label = 0, "dropped" // no answer was sent
		case li.clientGone:
			status, label = 0, "client_gone" // no one to answer
		}
		attrs := []slog.Attr{
			slog.String("req_id", reqID(r)),
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
		add(li.dropped, slog.Bool("response_dropped", true))
		add(li.clientGone, slog.Bool("client_gone", true))
		add(li.actor != "", slog.String("actor", li.actor))
		add(li.keyHash != "", slog.String("key_hash", li.keyHash))
		add(li.outcome != "", slog.String("outcome", string(li.outcome)))
		add(li.outcome != "", slog.String("path", string(li.path)))
		add(li.attempt > 0, slog.Int("client_attempt", li.attempt))
		add(li.code != "", slog.String("code", li.code))
		traceID := tracing.TraceID(r.Context())
		add(traceID != "", slog.String("trace_id", traceID))
		s.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
		if li.unavailable != nil {
			outage.answered(r.Context(), public(li.unavailable).Message, li.unavailable)
		}
		if s.Metrics != nil {
			s.Metrics.Request(route, label, d)
		}
	})
}

// recoverPanics turns a panic into a 500, logged once with its stack. A
// panic inside a one-phase work leaves no key (nothing was written yet); in
// two phase the claim stays until its lease passes, and a retry takes it over.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Logger.ErrorContext(r.Context(), "panic", "panic", v, "stack", string(debug.Stack()), "req_id", reqID(r))
				info(r).code = apperr.Internal
				writeResponse(w, Render(nil), false)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// refuseDeclaredOversize answers 413 a request that declares a body over body.MaxBytes,
// before its token and key are read: answered after them (a 400 or 401), it would be
// sent only once Go's server had read the body it does not need, or timed out waiting.
func (s *Server) refuseDeclaredOversize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > body.MaxBytes {
			_, err := body.Read(w, r, body.MaxBytes) // body_too_large, the connection closing
			WriteError(s.Logger, w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate resolves "Authorization: Bearer <token>" to an actor (Tokens,
// then Deps.Authenticate), or answers 401. The token is never logged. The
// actor is the first part of every key's scope: two actors' keys never meet,
// so one cannot replay, or block, another's answer.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		refusal := "send Authorization: Bearer <token> with a known token"
		actor, ok := s.Tokens.Actor(token)
		if !ok && s.Authenticate != nil {
			var err error
			if actor, err = s.Authenticate(token); err == nil {
				ok = true
			} else {
				refusal += "; " + err.Error()
			}
		}
		if !strings.EqualFold(scheme, "Bearer") || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="demo-api"`)
			WriteError(s.Logger, w, r, apperr.Errorf(apperr.Unauthorized, "%s", refusal))
			return
		}
		info(r).actor = actor
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey, actor)))
	})
}

// routeOf is the route pattern the router matched r to, or "unmatched".
func routeOf(r *http.Request) string {
	return cmp.Or(chi.RouteContext(r.Context()).RoutePattern(), "unmatched")
}

// ActorOf is the actor that authenticate found for r.
func ActorOf(r *http.Request) string {
	actor, _ := r.Context().Value(actorKey).(string)
	return actor
}
