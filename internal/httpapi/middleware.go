package httpapi

import (
	"context"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/problem"
)

// actorKey is the context key of the actor authenticate found.
type actorKey struct{}

// recoverPanics turns a panic into a 500, logged once with its stack. A
// panic inside a one-phase work leaves no key (nothing was written yet); in
// two phase the claim stays until its lease passes, and a retry takes it over.
func (s *api) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Logger.ErrorContext(r.Context(), "panic", "panic", v, "stack", string(debug.Stack()), "req_id", accesslog.ReqID(r))
				accesslog.Of(r).Code = apperr.Internal
				writeResponse(w, problem.Render(nil), false)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// refuseDeclaredOversize answers 413 a request that declares a body over body.MaxBytes,
// before its token and key are read: answered after them (a 400 or 401), it would be
// sent only once Go's server had read the body it does not need, or timed out waiting.
func (s *api) refuseDeclaredOversize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > body.MaxBytes {
			_, err := body.Read(w, r, body.MaxBytes) // body_too_large, the connection closing
			problem.Write(s.Logger, w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate resolves "Authorization: Bearer <token>" to an actor (Tokens,
// then Deps.Authenticate), or answers 401. The token is never logged. The
// actor is the first part of every key's scope: two actors' keys never meet,
// so one cannot replay, or block, another's answer.
func (s *api) authenticate(next http.Handler) http.Handler {
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
			problem.Write(s.Logger, w, r, apperr.Errorf(apperr.Unauthorized, "%s", refusal))
			return
		}
		accesslog.Of(r).Actor = actor
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, actor)))
	})
}

// ActorOf is the actor that authenticate found for r.
func ActorOf(r *http.Request) string {
	actor, _ := r.Context().Value(actorKey{}).(string)
	return actor
}
