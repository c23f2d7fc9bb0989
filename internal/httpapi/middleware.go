package httpapi

import (
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
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tracing"
)

// ctxKey is the type of this package's context keys.
type ctxKey int

const (
	actorKey ctxKey = iota
	logInfoKey
)

// logInfo collects what the request line logs; handlers fill it in.
type logInfo struct {
	actor      string
	keyHash    string
	outcome    idempotency.Outcome
	path       idempotency.Path
	attempt    int // X-Client-Attempt
	code       string
	dropped    bool // the connection was closed without an answer (Workshop-Drop-Response)
	clientGone bool // the client left before the answer, and the request ended for it
}

func info(r *http.Request) *logInfo {
	if li, ok := r.Context().Value(logInfoKey).(*logInfo); ok {
		return li
	}
	return &logInfo{}
}

func noteCode(r *http.Request, code string) { info(r).code = code }

// noteKey records a hash of the scope for the log: the raw key never is.
func noteKey(r *http.Request, s idempotency.Scope) {
	sum := sha256.Sum256([]byte(s.Actor + "\x00" + s.Operation + "\x00" + s.Key))
	info(r).keyHash = hex.EncodeToString(sum[:8])
}

func requestID(r *http.Request) string { return middleware.GetReqID(r.Context()) }

// apiHeaders are the security headers of every answer of the server: what
// it sends is never sniffed into another type, run as a page or framed
// (its only HTML, a problem's page, needs nothing more), nor kept by a
// cache (an answer is its actor's). The pages (package web) set their own
// Content-Security-Policy and Cache-Control over these.
var apiHeaders = [...][2]string{
	{"X-Content-Type-Options", "nosniff"},
	{"Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"},
	{"Referrer-Policy", "no-referrer"},
	{"Cache-Control", "no-store"},
}

// securityHeaders sets apiHeaders on every answer, before anything else
// runs: a 404 of the router and a recovered panic get them too.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, h := range apiHeaders {
			w.Header().Set(h[0], h[1])
		}
		next.ServeHTTP(w, r)
	})
}

// logRequests logs one line per request, and reports it to the metrics.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		li := &logInfo{}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), logInfoKey, li)))

		d := time.Since(start)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		status, statusLabel := ww.Status(), ""
		switch {
		case li.dropped:
			status, statusLabel = 0, "dropped" // no answer was sent
		case li.clientGone:
			status, statusLabel = 0, "client_gone" // no one to answer
		case status == 0:
			status = http.StatusOK // nothing written: net/http sends 200
		}
		if statusLabel == "" {
			statusLabel = strconv.Itoa(status)
		}
		attrs := []slog.Attr{
			slog.String("request_id", requestID(r)),
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.Int("status", status),
			slog.Duration("duration", d),
		}
		if li.dropped {
			attrs = append(attrs, slog.Bool("response_dropped", true))
		}
		if li.clientGone {
			attrs = append(attrs, slog.Bool("client_gone", true))
		}
		if li.actor != "" {
			attrs = append(attrs, slog.String("actor", li.actor))
		}
		if li.keyHash != "" {
			attrs = append(attrs, slog.String("key_hash", li.keyHash))
		}
		if li.outcome != "" {
			attrs = append(attrs, slog.String("outcome", string(li.outcome)), slog.String("path", string(li.path)))
		}
		if li.attempt > 0 {
			attrs = append(attrs, slog.Int("client_attempt", li.attempt))
		}
		if li.code != "" {
			attrs = append(attrs, slog.String("code", li.code))
		}
		if id := tracing.TraceID(r.Context()); id != "" {
			attrs = append(attrs, slog.String("trace_id", id))
		}
		s.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
		if s.Metrics != nil {
			s.Metrics.Request(route, statusLabel, d)
		}
	})
}

// recoverPanics turns a panic into a 500, logged once with its stack.
func recoverPanics(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					logger.ErrorContext(r.Context(), "panic", "panic", v, "stack", string(debug.Stack()), "request_id", requestID(r))
					noteCode(r, apperr.Internal)
					writeResponse(w, Render(nil), false)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// authenticate resolves "Authorization: Bearer <token>" to an actor, or
// answers 401. The token is hashed, never logged. A token that tokens do
// not hold goes to check, if set (Deps.Authenticate), whose error the 401
// adds to its detail.
func authenticate(logger *slog.Logger, tokens auth.Tokens, check func(token string) (string, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			token = strings.TrimSpace(token)
			refusal := "send Authorization: Bearer <token> with a known token"
			actor, ok := tokens.Actor(token)
			if !ok && check != nil {
				var err error
				if actor, err = check(token); err == nil {
					ok = true
				} else {
					refusal += "; " + err.Error()
				}
			}
			if !strings.EqualFold(scheme, "Bearer") || !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="demo-api"`)
				WriteError(logger, w, r, apperr.Errorf(apperr.Unauthorized, "%s", refusal))
				return
			}
			info(r).actor = actor
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey, actor)))
		})
	}
}

func ActorOf(r *http.Request) string {
	actor, _ := r.Context().Value(actorKey).(string)
	return actor
}
